"""Playbooks: what to deploy where, how to launch it, and how to judge it.

String fields that name places on a container (`target.path`,
`drafter.weights`, `server.vllm`, `server.host`, `state_dir`) are Jinja2
templates rendered per container with its `vars`, so one playbook serves the
lab and a real cluster alike: only the inventory differs.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, Field, model_validator

from orchestrator.drafters.kinds import DEFAULT_KIND, get_kind
from orchestrator.errors import InputError
from orchestrator.playbook_speed import Speed
from orchestrator.schema import (
    MAX_COUNT,
    Fraction,
    Name,
    Port,
    Positive,
    Schema,
    Seconds,
    validate_document,
)
from orchestrator.yamlsource import YamlDocument, load_yaml_file, parse_yaml, places

PLAYBOOK_DIR = Path(__file__).resolve().parent / "playbooks"


class TargetModel(Schema):
    """The model vLLM serves and the drafter drafts for."""

    path: str = Field(
        description="The target model's directory on the container (a template, e.g. "
        "`{{ vars.models_dir }}/Qwen3.6-27B`): what `vllm serve` loads, and where preflight "
        "reads the config, weights and tokenizer the drafter is checked against."
    )
    served_name: str = Field(
        description="vLLM's `--served-model-name`: the model name the gate's probe requests "
        "ask for, and the `model_name` label of the server's metrics (`orch alerts` selects "
        "by it)."
    )


def _known_kind(name: str) -> str:
    try:
        return get_kind(name).name
    except InputError as exc:
        raise ValueError(str(exc)) from None


class Drafter(Schema):
    """The draft model (or method) that proposes tokens for the target."""

    kind: Annotated[str, AfterValidator(_known_kind)] = Field(
        default=DEFAULT_KIND,
        description="The speculative-decoding method (`dflash`, `eagle3`, `mtp`, ...): what "
        "the launch passes as the method, which files a release renders, and which drafter "
        "checks preflight runs. `orch profiles` lists the kinds with their profiles.",
    )
    weights: str | None = Field(
        default=None,
        description="The drafter's model directory on the container (a template). Required "
        "for kinds that load a drafter directory, refused for those that load none (`mtp`, "
        "`ngram`). A release links to the files here and never changes them.",
    )
    config: Literal["rendered", "shipped"] | None = Field(
        default=None,
        description="Where the drafter's config.json comes from. `rendered`: the profile's "
        "config with `overrides` merged in, written into the release; `shipped`: the one in "
        "the drafter directory. Unset: rendered when the kind renders configs, else shipped.",
    )
    profile: str | None = Field(
        default=None,
        description="A built-in profile of a published drafter (`orch profiles`), e.g. "
        "`z-lab/Qwen3.6-27B-DFlash`: the config a rendered drafter starts from, and what "
        "preflight checks a drafter against. Its kind must be `kind`.",
    )
    overrides: dict[str, Any] = Field(
        default={},
        description="Fields merged into the profile's config before it is rendered "
        "(mappings merge recursively, anything else replaces). Only for a rendered config; "
        "without a profile they must be the whole config.",
    )


EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class SecretSource(Schema):
    """Where orch reads a secret's value on the machine running it (never the value
    itself): exactly one of `env`, `file` or `command`."""

    env: EnvName | None = Field(
        default=None, description="An environment variable of orch's own process."
    )
    file: str | None = Field(
        default=None,
        description="A file on the control machine (`~` expanded); its one line, the line "
        "break at its end left out.",
    )
    command: Annotated[list[str], Field(min_length=1)] | None = Field(
        default=None,
        description="A command run without a shell (a password manager, e.g. `[pass, show, "
        "vllm/api-key]`); its output, the line break at its end left out.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> SecretSource:
        given = [name for name in ("env", "file", "command") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of env, file or command"
                + (f" (got {', '.join(given)})" if given else "")
            )
        return self

    def describe(self) -> str:
        """The source in words, for errors: never the value."""
        if self.env is not None:
            return f"environment variable {self.env}"
        if self.file is not None:
            return f"file {self.file}"
        return f"command {' '.join(self.command or [])}"


class Server(Schema):
    """How vLLM is launched on each container: the release's `serve.sh`."""

    template: str = Field(
        default="vllm/serve.sh.j2",
        description="The launch script's Jinja2 template, by its name under orch's "
        "`templates/` directory.",
    )
    vllm: str = Field(
        default="{{ vars.vllm }}",
        description="The vLLM executable on the container (a template; an absolute path "
        "once rendered). The launch runs `VLLM serve TARGET ...`.",
    )
    host: str = Field(
        default="0.0.0.0",
        description="vLLM's `--host`: the address it listens on (a template, e.g. "
        "`{{ container.address }}`). orch reaches the server at the container's `address`, "
        "so this must include it.",
    )
    port: Port = Field(
        default=8000,
        description="vLLM's `--port`. Preflight refuses a port another process holds; the "
        "readiness check and the gate's probes go to the container's address on this port.",
    )
    tensor_parallel_size: Annotated[int, Field(ge=1, le=256)] = Field(
        default=1,
        description="vLLM's `--tensor-parallel-size`: GPUs one server uses. Preflight needs "
        "at least this many GPUs in the container, each with enough free memory.",
    )
    max_model_len: Annotated[int, Field(ge=1, le=1 << 24)] | None = Field(
        default=None,
        description="vLLM's `--max-model-len`, passed when set. The gate's long-context "
        "probes are sized to fit inside it (with `gate.probe.max_tokens`).",
    )
    num_speculative_tokens: Annotated[int, Field(ge=1, le=256)] = Field(
        default=15,
        description="Tokens the drafter proposes per step, in `--speculative-config`. "
        "Preflight checks it against what the drafter supports; after a passing gate orch "
        "says when the per-position acceptance suggests fewer.",
    )
    attention_backend: str | None = Field(
        default=None,
        description="vLLM's `--attention-backend`, passed when set (e.g. `flash_attn`): the "
        "target's backend. A DFlash drafter takes its own from `speculative_config`.",
    )
    speculative_config: dict[str, Any] = Field(
        default={},
        description="More keys of `--speculative-config` (e.g. the DFlash drafter's "
        "`attention_backend`); `method`, `model` and `num_speculative_tokens` are orch's, "
        "from the drafter and `num_speculative_tokens`. vLLM refuses a key it does not know.",
    )
    extra_args: list[str] = Field(
        default=[],
        description="More arguments for `vllm serve`, each passed as one word (shell-quoted), "
        "after orch's own.",
    )
    env: dict[EnvName, str] = Field(
        default={},
        description="Environment variables the launch script exports before starting vLLM "
        "(e.g. `VLLM_HOST_IP`); values are shell-quoted. Never a secret: they are written "
        "in the world-readable launch script (see `secrets`).",
    )
    secrets: dict[EnvName, SecretSource] = Field(
        default={},
        description="Environment variables whose values are secrets (e.g. `VLLM_API_KEY: "
        "{env: K}`), each read at run time from its source on the control machine. They "
        "reach the container only in the release's own file (mode 0600), which the launch "
        "script reads; manifests, diffs, logs and output name them and show `***`. "
        "`VLLM_API_KEY` is the key the gate's probes send.",
    )
    stop_timeout: Seconds = Field(
        default=30,
        description="Seconds the old server gets to exit after SIGTERM (sent to its "
        "recorded PID) before it is sent SIGKILL.",
    )

    @model_validator(mode="after")
    def _secrets_apart(self) -> Server:
        both = sorted(set(self.env) & set(self.secrets))
        if both:
            raise ValueError(
                f"{', '.join(both)} is in both env and secrets: keep it in secrets only"
            )
        return self


class Sampling(Schema):
    """How every probe request samples; ranges as vLLM's SamplingParams checks them (0.19.1
    `sampling_params.py:452-467`, 0.34.0 `:662-681`). Temperature is at most 2: vLLM answers
    400 above it from 0.24.0 (`vllm/sampling_params.py:529-533`; 0.34.0 `:672-676`)."""

    temperature: Annotated[float, Field(ge=0, le=2)] = Field(
        default=0.0, description="0 is greedy: the target's most likely token."
    )
    top_p: Annotated[float, Field(gt=0, le=1)] = Field(
        default=1.0, description="Nucleus sampling's probability mass; 1 keeps every token."
    )
    top_k: Annotated[int, Field(ge=0, le=MAX_COUNT)] = Field(
        default=0, description="Most likely tokens sampled from; 0 keeps every token."
    )
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = Field(
        default=None, description="Per-request seed (not sent when unset)."
    )


class Probe(Schema):
    """The traffic the gate sends to measure acceptance."""

    prompts: str = Field(
        default="builtin",
        description="`builtin` (prompts shipped with orch), or a JSONL file on the control "
        'machine with one `{"prompt": "..."}` per line. Long-context phases are built from '
        "orch's own long passages.",
    )
    max_tokens: Positive = Field(
        default=256,
        description="`max_tokens` of each probe request: tokens generated, hence drafts "
        "measured, per request.",
    )
    concurrency: Annotated[int, Field(ge=1, le=64)] = Field(
        default=4,
        description="Probe requests in flight at once in each phase (per-request phases run "
        "side by side: phases x concurrency in all).",
    )
    max_requests: Positive = Field(
        default=400,
        description="Most probe requests per phase (one phase per context-length bucket and "
        "endpoint); a phase that reaches it without a verdict is inconclusive.",
    )
    scrape_interval: Seconds = Field(
        default=1.0,
        description="Seconds between scrapes of the server's `/metrics` during a phase. "
        "Each interval's counter deltas are one batch of the gate's confidence bounds.",
    )
    endpoints: Annotated[list[Literal["completions", "chat"]], Field(min_length=1)] = Field(
        default=["completions", "chat"],
        description="OpenAI routes probed (`/v1/completions`, `/v1/chat/completions`), each "
        "a phase per context bucket: a chat template can change what the drafter sees.",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default={},
        description="Sent as `chat_template_kwargs` with every chat probe (e.g. "
        "`enable_thinking: false`): probe chat as production calls it.",
    )
    sampling: Sampling = Field(
        default=Sampling(),
        description="Sampling sent with every probe request (`temperature`, `top_p`, `top_k`, "
        "`seed`): the server's defaults never decide what the gate measures, and every "
        "verdict records it. Default greedy (temperature 0), as published acceptance figures "
        "are; set your clients' sampling to gate on theirs (acceptance falls as temperature "
        "rises).",
    )


class Gate(Schema):
    """When a new release is kept: acceptance measured on probe traffic, with bounds."""

    min_mean_acceptance_length: Annotated[float, Field(ge=1, le=257)] = Field(
        default=2.5,
        description="Tokens gained per draft step, the target's bonus token included "
        "(vLLM's mean acceptance length). A phase passes when its lower confidence bound "
        "reaches this, and fails when its upper bound is below it.",
    )
    min_position1_acceptance: Fraction | None = Field(
        default=0.5,
        description="Share of drafts whose first proposed token is accepted, judged with "
        "bounds like the mean. Near zero means a misaligned drafter (layer ids, mask token). "
        "`null` turns the check off.",
    )
    min_drafts: Positive = Field(
        default=200,
        description="Drafts a phase must measure before it may pass or fail; until then it "
        "is inconclusive.",
    )
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = Field(
        default=0.95,
        description="Two-sided confidence level of the bounds (batch means over scrape "
        "intervals, conservative for drafts correlated within a request).",
    )
    ready_timeout: Seconds = Field(
        default=900,
        description="Seconds a started server has to answer `/health` with 200 (loading "
        "the model included); past it, or when the server exits, the release fails.",
    )
    settle_seconds: Annotated[float, Field(ge=0, le=3600)] = Field(
        default=5,
        description="Seconds a release that passed its gate must go on serving before it "
        "is kept: its process alive and `/health` 200 throughout, then one probe request "
        "answered. A server that dies within seconds of being ready fails the gate and is "
        "rolled back; 0 keeps the one look (health and a probe) without waiting.",
    )
    time_budget: Seconds = Field(
        default=120,
        description="Seconds of probing for the whole gate. Per-request phases run at once "
        "within it; counter phases run one after another, each with an equal share of what "
        "is left. A phase out of time is inconclusive.",
    )
    acceptance_source: Literal["auto", "per_request", "counters"] = Field(
        default="auto",
        description="Where the gate reads acceptance. `per_request`: each probe response's "
        "own figures (`metrics.speculative_decoding`; the launch gets "
        "`--per-request-spec-decode-metrics summary`, vLLM 0.29.0 and later): all phases run "
        "at once, a decided phase's requests are cancelled, and other clients' traffic "
        "cannot enter the figures. `counters`: deltas of the server's /metrics counters, one "
        "phase after another, which any vLLM serves but which count every request the "
        "server handles. `auto`: per-request figures where the container's vLLM has them, "
        "counters elsewhere (the launch then goes without the flag). A server whose "
        "responses carry no figures is judged by counters; the report says which source "
        "was read and why.",
    )
    on_inconclusive: Literal["rollback", "keep", "pause"] = Field(
        default="rollback",
        description="What an inconclusive gate does: `rollback` (as a failure), `keep` "
        "the release when the server answered and drafts were measured, or `pause`: a "
        "deploy whose new server answered keeps it serving, holds its lock and waits for "
        "`orch promote` (keep it), `orch abort` (roll back) or `orch retry` (gate it "
        "again), as Argo Rollouts pauses an inconclusive analysis. A run killed while "
        "paused is rolled back by the next run. Elsewhere (rollback, restart, recovery) "
        "an inconclusive gate is a failure.",
    )
    pause_timeout: Seconds = Field(
        default=3600,
        description="Seconds a paused gate waits for a decision; then it is aborted "
        "(rolled back), and the run says the pause timed out.",
    )
    min_probe_responses: Positive = Field(
        default=4,
        description="Successful probe responses each phase needs before it can pass: "
        "counters that move while no request is answered prove nothing.",
    )
    max_probe_error_share: Fraction = Field(
        default=0.05,
        description="Failed probe requests above this share of a phase's finished ones "
        "fail the phase, whatever its acceptance (the verdict says how many and why); one "
        "failed request alone does not, unless none was answered.",
    )
    probe: Probe = Probe()
    speed: Speed = Speed()


def _percentage(value: str) -> str:
    if float(value.rstrip("%")) > 100:
        raise ValueError(f"{value!r} is more than 100%")
    return value


def _above_zero(value: str) -> str:
    if float(value.rstrip("%")) == 0:
        raise ValueError(f"{value!r} would be no container at all")
    return value


# "25%": a share of the run's containers (orchestrator/rollout.py rounds it).
Percentage = Annotated[str, Field(pattern=r"^\d+(\.\d+)?%$"), AfterValidator(_percentage)]
PositivePercentage = Annotated[Percentage, AfterValidator(_above_zero)]


class Rollout(Schema):
    """The order of containers in a run. Counts, or shares of the run's containers
    (`25%`, rounded down, at least one when above 0%)."""

    canary: Annotated[int, Field(ge=0, le=MAX_COUNT)] | Percentage = Field(
        default=1,
        description="Containers deployed first, one at a time, before any wave.",
    )
    parallel: Annotated[int, Field(ge=1, le=1024)] | PositivePercentage = Field(
        default=1,
        description="Containers deployed at once in each wave after the canaries (and in "
        "`orch rollback`).",
    )
    max_failures: Annotated[int, Field(ge=0, le=MAX_COUNT)] | Percentage = Field(
        default=0,
        description="Failed containers the run tolerates: once more have failed, no new "
        "container is started and the rest are reported `skipped`.",
    )
    pause: Seconds | None = Field(
        default=None,
        description="Seconds to wait between waves (never after the last, nor once the "
        "failure budget is spent).",
    )


HookCommand = Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]


class Hooks(Schema):
    """Commands run on the control machine at points of a run, e.g. to notify a team
    (orchestrator/fleet/hooks.py). Each is an argv list, run without a shell; a relative
    program path is taken from the playbook's directory. The run's facts are in
    `ORCH_*` environment variables, and the run's JSON document is on the standard
    input of those after it. Not run by `--dry-run`."""

    timeout: Seconds = Field(
        default=60,
        description="Seconds each hook may run; then it is killed (its whole process "
        "group) and counts as failed. What a hook leaves in its group when it exits is "
        "killed then.",
    )
    pre_deploy: HookCommand | None = Field(
        default=None,
        description="Before a deploy connects to anything: exiting non-zero stops the "
        "run with nothing changed (exit 1).",
    )
    post_deploy: HookCommand | None = Field(
        default=None,
        description="After a deploy whose result is ok. Its failure is reported, never "
        "the run's result.",
    )
    on_rollback: HookCommand | None = Field(
        default=None,
        description="After a deploy that rolled a container back, and after `orch "
        "rollback`. Reported; never changes the result.",
    )
    on_failure: HookCommand | None = Field(
        default=None,
        description="After a deploy or rollback whose result is not ok (not applied, "
        "needs attention, interrupted). Reported; never changes the result.",
    )


class Playbook(Schema):
    """What to deploy where, how to launch it, and how to judge it."""

    name: Name = Field(
        description="The deployment's name: its directory under `state_dir` on each "
        "container (releases, lock, journal, logs) and its name in history."
    )
    targets: Annotated[list[str], Field(min_length=1)] = Field(
        description="The inventory's containers this playbook deploys to: names, groups or "
        "globs, as `--limit` takes them (`!name` excludes); `--limit` narrows them further."
    )
    state_dir: str = Field(
        default="{{ vars.state_dir }}",
        description="Where orch keeps its deployments on each container (a template; an "
        "absolute path once rendered). This playbook's is `STATE_DIR/NAME`.",
    )
    target: TargetModel
    drafter: Drafter
    server: Server = Server()
    gate: Gate = Gate()
    rollout: Rollout = Rollout()
    releases_kept: Annotated[int, Field(ge=2, le=1000)] = Field(
        default=5,
        description="Releases kept on each container after a deploy passes its gate; older "
        "ones are removed (never the new release nor the one it replaced).",
    )
    lock_lease: Seconds | None = Field(
        default=None,
        description="Seconds after which a deploy lock counts as abandoned and is taken "
        "over. Unset: never by age; a lock whose run is provably gone (same control host, "
        "its PID dead) is taken over regardless, and `orch unlock` removes any other.",
    )
    hooks: Hooks = Hooks()
    source: str = Field(default="", exclude=True)
    source_sha256: str = Field(default="", exclude=True)
    places: dict[str, str] = Field(
        default={}, exclude=True, description="Where each field stands, by its dotted path."
    )
    assignments: tuple[str, ...] = Field(
        default=(), exclude=True, description="The `--set` assignments applied over the file."
    )


def find_playbook(name_or_path: str) -> Path:
    """A path as given, or a name looked up among the shipped playbooks (their real path,
    so errors point at the file a user edits)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    candidate = PLAYBOOK_DIR / f"{name_or_path}.yaml"
    if candidate.exists():
        return candidate.resolve()
    known = ", ".join(sorted(p.stem for p in PLAYBOOK_DIR.glob("*.yaml")))
    raise InputError(f"no playbook {name_or_path!r} (known: {known})")


def command_name(playbook: Playbook) -> str:
    """How a printed command names `playbook` so that it runs as printed: its name when
    that finds this very file among the shipped playbooks, else its path as given."""
    shipped = PLAYBOOK_DIR / f"{playbook.name}.yaml"
    if not playbook.source or (
        shipped.exists() and Path(playbook.source).resolve() == shipped.resolve()
    ):
        return playbook.name
    return playbook.source


def load_playbook(path: Path, assignments: Sequence[str] = ()) -> Playbook:
    """Load a playbook and apply `--set dotted.path=VALUE` overrides (VALUE is YAML)."""
    document = load_yaml_file(path)
    if not isinstance(document.data, dict):
        raise InputError(f"{path}:1:1: expected a mapping at the top level")
    applied = apply_assignments(document, assignments)
    return validate_document(Playbook, applied).model_copy(
        update={
            "source": str(path),
            "source_sha256": document.sha256,
            "places": places(applied),
            "assignments": tuple(assignments),
        }
    )


def apply_assignments(document: YamlDocument, assignments: Sequence[str]) -> YamlDocument:
    """Set each `dotted.path=VALUE` in a copy of the document's data."""
    data = copy.deepcopy(document.data)
    origins = dict(document.origins)
    for assignment in assignments:
        dotted_path, sep, raw = assignment.partition("=")
        if not sep or not dotted_path:
            raise InputError(f"--set {assignment!r}: expected PATH=VALUE")
        parts = tuple(dotted_path.split("."))
        check_settable(Playbook, parts, assignment)
        value = parse_yaml(raw, f"--set {dotted_path}").data
        node = data
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[parts[-1]] = value
        origins[parts] = f"--set {dotted_path}"
    return dataclasses.replace(document, data=data, origins=origins)


def check_settable(model: type[BaseModel], parts: tuple[str, ...], assignment: str) -> None:
    """Refuse a path that names no field; below a free-form mapping anything goes."""
    current: Any = model
    for depth, part in enumerate(parts):
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            here = ".".join(parts[:depth])
            raise InputError(f"--set {assignment!r}: {here} is not a section with fields")
        fields = {n: f for n, f in current.model_fields.items() if not f.exclude}
        if part not in fields:
            close = difflib.get_close_matches(part, list(fields), n=1)
            meant = ".".join([*parts[:depth], close[0]]) if close else None
            raise InputError(
                f"--set {assignment!r}: unknown field {'.'.join(parts[: depth + 1])!r} "
                + (f"(did you mean {meant!r}?)" if meant else f"(fields here: {', '.join(fields)})")
            )
        current = _unwrap(fields[part].annotation)
        if typing.get_origin(current) is dict:
            return


def _unwrap(annotation: Any) -> Any:
    """Strip Optional[...] and Annotated[...] down to the type that has fields."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = args[0] if len(args) == 1 else annotation
            if len(args) != 1:
                return annotation
        else:
            return annotation
