"""Playbooks: what to deploy where, how to launch it, and how to judge it.

String fields that name places on a container (`target.path`,
`drafter.weights`, `server.vllm`, `server.host`, `state_dir`) are Jinja2
templates rendered per container with its `vars`, so one playbook serves the
lab and a real cluster alike: only the inventory differs.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, Field

from orchestrator.drafters.kinds import DEFAULT_KIND, get_kind
from orchestrator.errors import InputError
from orchestrator.schema import Name, Port, Schema, validate_document
from orchestrator.yamlsource import YamlDocument, load_yaml_file, parse_yaml

PLAYBOOK_DIR = Path(__file__).resolve().parent / "playbooks"

# Every number has a range: a value outside it (infinite, NaN, negative, absurdly large)
# is refused when the playbook is loaded, before anything is rendered or written.
MAX_COUNT = 1_000_000
WEEK = 7 * 24 * 3600.0
Positive = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Seconds = Annotated[float, Field(gt=0, le=WEEK)]
Fraction = Annotated[float, Field(ge=0, le=1)]


class TargetModel(Schema):
    path: str
    served_name: str


def _known_kind(name: str) -> str:
    try:
        return get_kind(name).name
    except InputError as exc:
        raise ValueError(str(exc)) from None


class Drafter(Schema):
    kind: Annotated[str, AfterValidator(_known_kind)] = DEFAULT_KIND
    weights: str | None = None
    config: Literal["rendered", "shipped"] | None = None
    """rendered: the profile's config with the overrides; shipped: the drafter dir's own.
    Unset: rendered when the kind renders configs, else shipped."""
    profile: str | None = None
    overrides: dict[str, Any] = {}


class Server(Schema):
    template: str = "vllm/serve.sh.j2"
    vllm: str = "{{ vars.vllm }}"
    host: str = "0.0.0.0"
    port: Port = 8000
    tensor_parallel_size: Annotated[int, Field(ge=1, le=256)] = 1
    max_model_len: Annotated[int, Field(ge=1, le=1 << 24)] | None = None
    num_speculative_tokens: Annotated[int, Field(ge=1, le=256)] = 15
    attention_backend: str | None = None
    extra_args: list[str] = []
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str] = {}
    stop_timeout: Seconds = 30


class Probe(Schema):
    prompts: str = "builtin"
    max_tokens: Positive = 256
    concurrency: Annotated[int, Field(ge=1, le=64)] = 4
    max_requests: Positive = 400  # per phase (context bucket x endpoint)
    scrape_interval: Seconds = 1.0
    endpoints: Annotated[list[Literal["completions", "chat"]], Field(min_length=1)] = [
        "completions",
        "chat",
    ]
    chat_template_kwargs: dict[str, Any] = {}


class Gate(Schema):
    min_mean_acceptance_length: Annotated[float, Field(ge=1, le=257)] = 2.5
    min_position1_acceptance: Fraction | None = 0.5
    min_drafts: Positive = 200
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = 0.95
    ready_timeout: Seconds = 900
    time_budget: Seconds = 120
    on_inconclusive: Literal["rollback", "keep"] = "rollback"
    min_responses: Positive = 4
    """Successful probe responses each phase needs before it can pass."""
    max_request_error_share: Fraction = 0.05
    """Failed probe requests above this share of a phase's finished ones fail it."""
    probe: Probe = Probe()


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
    canary: Annotated[int, Field(ge=0, le=MAX_COUNT)] | Percentage = 1
    parallel: Annotated[int, Field(ge=1, le=1024)] | PositivePercentage = 1
    max_failures: Annotated[int, Field(ge=0, le=MAX_COUNT)] | Percentage = 0
    pause: Seconds | None = None  # between waves


class Playbook(Schema):
    name: Name
    targets: Annotated[list[str], Field(min_length=1)]
    state_dir: str = "{{ vars.state_dir }}"
    target: TargetModel
    drafter: Drafter
    server: Server = Server()
    gate: Gate = Gate()
    rollout: Rollout = Rollout()
    releases_kept: Annotated[int, Field(ge=2, le=1000)] = 5
    # A deploy lock older than this is taken over as abandoned (default: never by age;
    # a lock whose run is provably gone on this control host is taken over regardless).
    lock_lease: Seconds | None = None
    source: str = Field(default="", exclude=True)
    source_sha256: str = Field(default="", exclude=True)
    assignments: tuple[str, ...] = Field(default=(), exclude=True)
    """The `--set` assignments applied over the file, as given."""


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
            raise InputError(
                f"--set {assignment!r}: unknown field {'.'.join(parts[: depth + 1])!r} "
                f"(fields here: {', '.join(fields)})"
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
