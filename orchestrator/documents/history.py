"""The runs as the local history gives them back (`orch history`, `orch report`): each
run's document as it was recorded, read once where the history is read."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from orchestrator.contract import Document, RunResult
from orchestrator.drafters.findings import Finding

Envelope = Annotated[str | None, Field(exclude=True)]
"""A recorded run's own `kind` and `api_version`: a history lists runs, not documents."""


class Recorded(BaseModel):
    """Something read back from the history: it serialises as it was recorded, with the
    fields its record has, in their order. Records of older versions lack fields that
    came later, and keep fields since dropped."""

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _as_recorded(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        given = self.model_fields_set | set(self.model_extra or {})
        return {key: value for key, value in handler(self).items() if key in given}


class RecordedTarget(Recorded):
    """One container's outcome in a recorded run (an interrupted run's entry has only
    `name`, `result`, `step`, `release` and `current`)."""

    name: str
    host: str | None = None
    result: str
    step: str | None = None
    release: str | None = None
    previous_release: str | None = None
    server_version: str | None = None
    gate: dict[str, Any] | None = None
    """The gate report's JSON as that version wrote it: readers take what they find."""
    rollback_gate: dict[str, Any] | None = None
    findings: list[Finding] = []
    error: str | None = None
    steps: dict[str, float] = {}
    notes: list[str] = []
    recovered: dict[str, Any] | None = None
    current: str | None = None
    diff: str | None = None
    replaced: dict[str, Any] | None = None
    changes: str | None = None
    """The files' diff a deploy read (deploys only)."""

    @property
    def ended_on(self) -> str | None:
        """The release the run left the container on: `current`; records from before
        runs kept it have only the release they attempted."""
        return self.current if "current" in self.model_fields_set else self.release

    @property
    def files_diff(self) -> str | None:
        """The files' diff the run read: a deploy's `changes`; records from before
        deploys kept it have only what `--diff` showed."""
        return self.changes if "changes" in self.model_fields_set else self.diff


class RecordedRollbackTo(Recorded):
    """A rollback's `--to`: what it named, and the run whose state it restored."""

    query: str
    run_id: str | None = None
    release: str | None = None


class RecordedRun(Recorded):
    """A run as the history keeps it: its document (any run kind), and who ran it with
    which command. Fields are declared in the order the run kinds print them."""

    kind: Envelope = None
    api_version: Envelope = None
    playbook: str
    run_id: str
    started: str | None = None
    method: str | None = None
    drafter: str | None = None
    model: str | None = None
    inventory: str | None = None
    """Runs recorded before runs named their inventory have none."""
    assignments: list[str] = []
    result: str
    """In the words of the version that recorded it (older ones: `not applied`)."""
    recovered_by: str | None = None
    targets: list[RecordedTarget] = []
    """None in a tune's record: its depths are deploys of their own."""
    action: str | None = None
    to: RecordedRollbackTo | None = None
    rollout: dict[str, Any] | None = None
    """The rollout's settings and waves, as `orch report` does not read them."""
    connections: list[dict[str, Any]] | None = None
    log: str | None = None
    warnings: list[str] = []
    user: str
    command: str


class History(Document):
    """`orch history --json`: the runs, newest first, each as it was recorded (result
    words of older records in today's vocabulary)."""

    kind: Literal["History"] = "History"
    result: RunResult = "ok"
    runs: list[RecordedRun]

    @classmethod
    def of(cls, runs: list[RecordedRun]) -> History:
        return cls(runs=[in_todays_words(run) for run in runs])


def in_todays_words(run: RecordedRun) -> RecordedRun:
    """`run` with its result in today's vocabulary (older records: `not applied`)."""
    return run.model_copy(update={"result": run.result.replace(" ", "_")})
