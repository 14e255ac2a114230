"""The server's own dry run on a container: vLLM judges the exact launch.

`validator_program.py` (beside this module) runs on the container with the
interpreter of its `vllm`, vLLM's own start-up checks over one launch. Here:
`request` (its input), `command` (the argv that finds the interpreter and runs
the program from stdin), `parse` (its reply, read strictly: one JSON document of
a fixed shape, text only, so a hostile reply can neither run code nor carry
markup) and `check`, which runs it. The reply says vLLM's version too: one process
per check, whether it can run or not. A passing verdict is kept on the container
and reused while the launch and the install are unchanged (`container/verdict.py`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator import remotejson
from orchestrator.container import validator_program
from orchestrator.container.shell import builder
from orchestrator.errors import OrchError
from orchestrator.transport.base import Transport

PROGRAM_FILE = "validator_program.py"
TIMEOUT = 300.0
"""vLLM's import alone takes seconds (10 - 20 s on a busy 2-core machine), and
building the model configs inspects each architecture in a subprocess."""
MAX_REPLY = 256 * 1024
STAGES = tuple(stage.__name__ for stage in validator_program.STAGES)
"""The names of the program's stages, in its order: the only names a reply may give."""
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
    """What the target's vLLM said (`reply`), or why it could not be asked (`unavailable`)
    and what its `vllm --version` printed then (`version_said`, when no Python was found).
    `reused`: when and by which run a passing verdict was reached, when this one is
    that verdict read back instead of a new check (empty: checked now)."""

    reply: Reply | None = None
    unavailable: str = ""
    version_said: str | None = None
    reused: str = ""

    @property
    def passed(self) -> bool:
        """vLLM ran every stage it has without refusing the launch."""
        return self.reply is not None and all(s.status != "error" for s in self.reply.stages)


def program() -> bytes:
    """The on-container program, sent on stdin."""
    return (resources.files(__package__) / PROGRAM_FILE).read_bytes()


PYTHON_OF = """\
python_of() {
  read -r _first < "$1" 2>/dev/null || _first=
  case $_first in
    '#!/'*python*) _python=${_first#??}; echo "${_python%% *}" ;;
    *) echo "${1%/*}/python" ;;
  esac
}
"""
"""sh: the interpreter the `vllm` at $1 runs on: its shebang's Python when it is a console
script, else the `python` beside it (a venv)."""
FIND_PYTHON = (
    PYTHON_OF
    + """\
vllm=$1; shift
python=$(python_of "$vllm")
[ -x "$python" ] && exec "$python" - "$@"
echo "$python: python: not found" >&2
"$vllm" --version < /dev/null 2>/dev/null
exit 127
"""
)
"""Runs the program with the Python of `vllm`. Without one the check cannot run, and the
same process asks `vllm --version` for the version to judge by (stdout, exit 127)."""
NO_PYTHON = 127


def request(argv: Sequence[str], env: dict[str, str], stage: dict[str, dict[str, str]]) -> dict:
    """The program's input: the launch's words from `serve` on, its exports, and the
    directories to stage (dir -> {file name: text}) that do not exist on the target yet."""
    return {"argv": list(argv), "env": dict(env), "stage": stage}


@builder
def validate_launch(vllm: str, payload: dict) -> list[str]:
    """`PYTHON - REQUEST`: the program comes on stdin, the request as one argument."""
    return ["/bin/sh", "-c", FIND_PYTHON, "sh", vllm, json.dumps(payload, sort_keys=True)]


def parse(stdout: bytes) -> Reply:
    """The program's one JSON document; anything else raises ValueError."""
    if len(stdout) > MAX_REPLY:
        raise ValueError(f"the reply is {len(stdout)} bytes, more than {MAX_REPLY}")
    try:
        data = remotejson.loads(stdout.decode("utf-8"))
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
        result = transport.run(validate_launch(vllm, payload), program(), timeout)
    except OrchError as exc:
        return ServerCheck(unavailable=str(exc)[:300])
    if not result.ok:
        detail = (result.error_text or result.text).strip()[-300:]
        return ServerCheck(
            unavailable=f"the Python of {vllm}: exit {result.exit_code}: {detail}",
            version_said=result.stdout.decode("utf-8", "replace")
            if result.exit_code == NO_PYTHON
            else None,
        )
    try:
        return ServerCheck(parse(result.stdout))
    except ValueError as exc:
        return ServerCheck(unavailable=str(exc)[:600])
