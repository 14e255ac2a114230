"""The server's own dry run: vLLM on the target judges the exact launch.

`request` builds what the on-container program (`validator_program.py`, shipped
beside this module) needs from a rendered launch script; `command` is the argv
that runs it with the Python beside the target's `vllm`; `parse` reads its reply
strictly (one JSON document of a fixed shape, text only: a hostile reply can
neither run code nor carry markup); `findings` turns the reply into findings.
`check` runs it over a transport. Nothing is cached: every check asks the vLLM
installed now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.drafters.findings import Finding
from orchestrator.errors import OrchError
from orchestrator.serving.judge import Launch
from orchestrator.transport.base import Transport

PROGRAM_FILE = "validator_program.py"
TIMEOUT = 300.0
"""vLLM's import alone takes seconds (10 - 20 s on a busy 2-core machine), and
building the model configs inspects each architecture in a subprocess."""
MAX_REPLY = 256 * 1024
STAGES = (
    "parser",
    "environment",
    "engine_args",
    "model_config",
    "speculative_config",
    "drafter_layers",
)
WHAT = {
    "parser": "the `vllm serve` parser",
    "environment": "its environment check",
    "engine_args": "its engine arguments",
    "model_config": "the target's ModelConfig",
    "speculative_config": "its SpeculativeConfig",
    "drafter_layers": "the DFlash layer resolver",
}
REPORTED_WARNINGS = ("environment", "speculative_config", "drafter_layers")
"""Stages whose vLLM warnings are about the launch (the others log import noise)."""

Text = Annotated[str, Field(max_length=4000)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Stage(_Strict):
    name: Literal[STAGES]  # type: ignore[valid-type]
    status: Literal["ok", "error", "absent"]
    detail: Text
    warnings: Annotated[list[Text], Field(max_length=20)] = []
    keys: Annotated[list[Text], Field(max_length=20)] = []
    layers: Annotated[list[tuple[int | None, bool]], Field(max_length=1024)] = []
    runner: Text = ""
    absent: Text = ""
    seconds: float


class Reply(_Strict):
    version: Text
    stages: Annotated[list[Stage], Field(max_length=len(STAGES))]
    seconds: float


class Failed(_Strict):
    failed: Text


@dataclass(frozen=True)
class ServerCheck:
    """What the target's vLLM said (`reply`), or why it could not be asked (`unavailable`)."""

    reply: Reply | None = None
    unavailable: str = ""


def program() -> bytes:
    """The on-container program, sent on stdin."""
    return (resources.files(__package__) / PROGRAM_FILE).read_bytes()


FIND_PYTHON = """\
vllm=$1; shift
read -r first < "$vllm" 2>/dev/null || first=
case $first in
  '#!/'*python*) python=${first#??}; python=${python%% *} ;;
  *) python=${vllm%/*}/python ;;
esac
exec "$python" - "$@"
"""
"""The interpreter `vllm` runs on: its shebang's Python when it is a console script,
else the `python` beside it (a venv)."""


def request(launch: Launch, stage: dict[str, dict[str, str]]) -> dict:
    """The program's input: the launch's argv from `serve` on, its exports, and the
    directories to stage (dir -> {file name: text}) that do not exist on the target yet."""
    return {"argv": list(launch.argv), "env": dict(launch.env), "stage": stage}


def command(vllm: str, payload: dict) -> list[str]:
    """`PYTHON - REQUEST`: the program comes on stdin, the request as one argument."""
    return ["/bin/sh", "-c", FIND_PYTHON, "sh", vllm, json.dumps(payload, sort_keys=True)]


def parse(stdout: bytes) -> Reply:
    """The program's one JSON document; anything else raises ValueError."""
    if len(stdout) > MAX_REPLY:
        raise ValueError(f"the reply is {len(stdout)} bytes, more than {MAX_REPLY}")
    try:
        data = json.loads(stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"the reply is not one JSON document ({exc})") from None
    try:
        if isinstance(data, dict) and "failed" in data:
            raise ValueError("the program failed: " + Failed.model_validate(data).failed[-600:])
        return Reply.model_validate_json(stdout)  # strict, JSON arrays as tuples
    except ValidationError as exc:
        raise ValueError(
            f"the reply has an unexpected shape ({exc.error_count()} problems)"
        ) from None


def check(transport: Transport, vllm: str, payload: dict, timeout: float = TIMEOUT) -> ServerCheck:
    """Run the program on the target; a failure to run it is `unavailable`, never raised."""
    try:
        result = transport.run(command(vllm, payload), program(), timeout)
    except OrchError as exc:
        return ServerCheck(unavailable=str(exc)[:300])
    if not result.ok:
        detail = (result.error_text or result.text).strip()[-300:]
        return ServerCheck(unavailable=f"the Python of {vllm}: exit {result.exit_code}: {detail}")
    try:
        return ServerCheck(parse(result.stdout))
    except ValueError as exc:
        return ServerCheck(unavailable=str(exc)[:600])


def findings(found: ServerCheck, launch: Launch) -> list[Finding]:
    """vLLM's refusal as an error in its own words, naming the flag, variable or key;
    its warnings about the launch; and what it could not check, as one warning."""
    if found.reply is None:
        return [
            Finding.warning(
                "server.check",
                f"the target's vLLM could not check the launch ({found.unavailable}): "
                "not checked by the server; orch's capability table judges it alone",
            )
        ]
    reply, result = found.reply, []
    name = f"vLLM {reply.version}"
    unchecked = []
    for stage in reply.stages:
        if stage.status == "error":
            result.append(
                Finding.error(
                    _field(stage, launch),
                    f"{name} refuses this launch at start ({WHAT[stage.name]}): {stage.detail}",
                    actual=stage.detail.splitlines()[0][:200] if stage.detail else None,
                )
            )
        elif stage.status == "absent":
            unchecked.append(f"{WHAT[stage.name]} ({stage.detail})")
        for reason in (stage.absent and f"{stage.absent} is absent", stage.runner):
            if reason:
                unchecked.append(f"{WHAT[stage.name]}: {reason}")
        if stage.name in REPORTED_WARNINGS:
            result += [
                Finding.warning(_field(stage, launch, text), f"{name} warns at start: {text}")
                for text in stage.warnings
            ]
    if unchecked:
        result.append(
            Finding.warning(
                "server.check",
                f"not checked by the server ({name}): " + "; ".join(unchecked) + "; orch's "
                "capability table judges these",
            )
        )
    return result


def summary(found: ServerCheck) -> str:
    """One line: which stages the target's vLLM ran, and how long it took."""
    if found.reply is None:
        return f"not checked by the server: {found.unavailable}"
    reply = found.reply
    stages = ", ".join(f"{s.name} {s.status}" for s in reply.stages)
    return f"vLLM {reply.version} checked the launch in {reply.seconds:.1f} s: {stages}"


def _field(stage: Stage, launch: Launch, text: str = "") -> str:
    """The playbook field vLLM's words point at: a variable, a speculative key, a flag."""
    text = text or stage.detail
    if stage.name == "environment":
        named = [n for n in launch.env if n in text]
        return f"server.env.{named[0]}" if named else "server.env"
    if stage.name == "speculative_config":
        config = launch.speculative_config or {}
        keys = [k.rsplit(".", 1)[-1] for k in stage.keys if k] + [k for k in config if k in text]
        return f"server.speculative_config.{keys[0]}" if keys else "server.speculative_config"
    if stage.name == "drafter_layers":
        return "drafter.config.layer_types"
    if stage.name == "parser":
        flags = [w for w in launch.argv if w.startswith("--") and w.split("=")[0] in text]
        return f"server.args {flags[0]}" if flags else "server.args"
    return f"server.{stage.name}"
