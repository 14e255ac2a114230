"""What happened on one container in a deploy or rollback run."""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Any

import pydantic
from pydantic import Field, SerializationInfo, SerializerFunctionWrapHandler, model_serializer

from orchestrator.contract import KEEP_CHANGES, OnlyWhenSet
from orchestrator.drafters.findings import Finding
from orchestrator.durations import Seconds
from orchestrator.gate import GateReport


@pydantic.dataclasses.dataclass
class Outcome:
    """What happened on one container; `result` is the contract of --json, and the
    fields in their order are the target's entry in a run's document."""

    name: str
    host: str
    result: str = "failed"
    release: str | None = None
    previous_release: str | None = None
    server_version: str | None = None
    gate: GateReport | None = None
    rollback_gate: GateReport | None = None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    steps: dict[str, Seconds] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    recovered: dict[str, Any] | None = None
    current: str | None = None  # the release `current` points at when the run ends
    diff: Annotated[str | None, OnlyWhenSet] = None
    """With --diff: `diff -u` of current vs new ("" = no change)."""
    replaced: Annotated[dict[str, Any] | None, OnlyWhenSet] = None
    """With `deploy --replace`: the other playbook's server it stopped, and what became of it."""
    exit_code: Annotated[int, Field(exclude=True)] = 0
    changes: Annotated[str | None, Field(exclude=True)] = None
    """The same diff, read on every deploy: kept in the local history for `orch report`."""

    @model_serializer(mode="wrap")
    def _changes_when_kept(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, object]:
        """A deploy's record in the local history keeps each container's diff (`orch
        report` shows it); the document the deploy prints does not."""
        fields = handler(self)
        return {**fields, "changes": self.changes} if info.context == KEEP_CHANGES else fields
