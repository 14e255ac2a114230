"""The one JSON contract every `--json` prints (docs/json.md).

Each document is an object with `kind` and `api_version` first; documents about
containers list them under `targets`, each with `name`. Result words come from
the two vocabularies below, so a program can match on them across commands.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

API_VERSION: Final = "orch/v1"

Kind = Literal[
    "DeployRun",
    "RollbackRun",
    "ServerRun",
    "Status",
    "Verify",
    "Findings",
    "Unlock",
    "History",
    "RunLog",
    "Releases",
    "Logs",
    "Profiles",
    "Render",
    "Doctor",
    "Inventory",
    "InventoryImport",
    "Completion",
    "Alerts",
    "Explain",
    "Watch",
    "LabUp",
    "LabDown",
    "LabStatus",
    "Error",
]

RunResult = Literal["ok", "not_applied", "bad_input", "needs_attention", "interrupted"]
"""A whole command's result: the worst of its targets, as its exit code says."""

TargetResult = Literal[
    "deployed",
    "unchanged",
    "regated",
    "rolled_back",
    "failed",
    "skipped",
    "interrupted",
    "dry_run",
    "stopped",
    "started",
    "restarted",
    "removed",
    "ok",
    "drift",
    "unreachable",
    "error",
]
"""What happened on one container."""

TargetState = Literal[
    "serving",
    "nothing_deployed",
    "deploying",
    "stopped",
    "unhealthy",
    "interrupted",
    "unreachable",
]
"""Where one container stands (`orch status`)."""

CheckStatus = Literal["ok", "fail", "info"]
"""One `orch doctor` check."""

_BY_EXIT_CODE: dict[int, RunResult] = {
    0: "ok",
    1: "not_applied",
    2: "bad_input",
    3: "needs_attention",
}


def run_result(exit_code: int) -> RunResult:
    """The run's result word for its exit code (130/143: interrupted)."""
    return _BY_EXIT_CODE.get(exit_code, "interrupted")


KEEP_CHANGES = "keep_changes"
"""A serialisation context: outcomes give the diff each read (`changes`) too, as a
deploy's record in the local history keeps it for `orch report`."""


def jsonable(value: object, context: str | None = None) -> Any:
    """`value` as JSON data, in the shape its type declares: documents and results are
    pydantic models and dataclasses, and nothing else turns them into dicts."""
    return to_jsonable_python(value, context=context)


OnlyWhenSet = Field(exclude_if=lambda value: value is None)
"""A field a document prints only when it has a value (`None`: the key is left out)."""


class Document(BaseModel):
    """The envelope: what every document starts with. Each kind's model extends it with
    its own fields, declared in the order they print."""

    kind: Kind
    api_version: Literal["orch/v1"] = API_VERSION


class TargetEntry(BaseModel):
    """What every entry under `targets` has; commands add their own fields."""

    model_config = ConfigDict(extra="allow")
    name: str
    result: TargetResult | None = None
    state: TargetState | None = None
    host: str | None = None
    release: str | None = None
    health: int | None = None
    error: str | None = None


class AnyDocument(Document):
    """Any command's output, as a schema: the envelope and the fields that mean the same
    in every kind (docs/json.md). Tests validate every command's output against it."""

    model_config = ConfigDict(extra="allow")
    result: RunResult | None = None
    state: TargetState | None = None
    targets: list[TargetEntry] | None = None


class ErrorLine(BaseModel):
    """One line of an error, with where it points (None where the line does not say):
    `inventory.yaml:12:5: containers.ct200.vmid: ...`."""

    file: str | None
    line: int | None
    column: int | None
    field: str | None
    message: str


class Error(Document):
    """The one document a `--json` command prints when it stops before its own."""

    kind: Literal["Error"] = "Error"
    result: RunResult
    message: str
    errors: list[ErrorLine]
