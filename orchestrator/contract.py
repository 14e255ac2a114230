"""The words every layer agrees on: the result words a command and a container end
with, the action names, the envelope every JSON document starts with, and `jsonable`,
the one way a result becomes JSON data (docs/json.md). The ground floor: it imports
nothing of orch, so the results below the documents and the documents alike use it.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

API_VERSION: Final = "orch/v1"

Kind = Literal[
    "DeployRun",
    "RollbackRun",
    "BaselineRun",
    "ServerRun",
    "Status",
    "Verify",
    "Findings",
    "Unlock",
    "Decide",
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
    "Tune",
    "Report",
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
    "measured",
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
    "paused",
    "stopped",
    "crashed",
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


Action = Literal["stop", "start", "restart", "remove"]
"""The server actions: `orch stop|start|restart|remove`."""
