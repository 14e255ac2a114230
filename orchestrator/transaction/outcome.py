"""What happened on one container in a deploy, rollback or server action run, and
the two things a run may report beside it: the interrupted run it recovered, and
what became of the playbook `deploy --replace` stopped."""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

import pydantic
from pydantic import Field, SerializationInfo, SerializerFunctionWrapHandler, model_serializer

from orchestrator.baseline import BaselineRecord
from orchestrator.container.pause import Decision
from orchestrator.contract import KEEP_CHANGES, OnlyWhenSet, TargetResult
from orchestrator.drafters.findings import Finding
from orchestrator.durations import Seconds
from orchestrator.gate import GateReport
from orchestrator.gate.report import SpeedReport


@pydantic.dataclasses.dataclass
class StayedStopped:
    """`deploy --replace` passed: the replaced playbook's server stays stopped."""

    playbook: str
    release: str
    result: Literal["stopped"] = "stopped"


@pydantic.dataclasses.dataclass
class Restored:
    """`deploy --replace` did not pass: the replaced playbook's release was started
    again and gated with its own settings (`failed`: that gate did not pass either)."""

    playbook: str
    release: str
    result: Literal["restored", "failed"]
    gate: GateReport
    error: str | None


Replaced = Annotated[StayedStopped | Restored, Field(discriminator="result")]
"""What became of the playbook `deploy --replace` stopped."""


@pydantic.dataclasses.dataclass
class Recovered:
    """The interrupted run a run found in the journal and settled before its own work."""

    inferred: str | None
    """What was read from the container when its journal could not be read, else None."""
    run_id: str
    started: str
    action: str
    step: str
    from_release: str | None
    to_release: str
    back_on: str | None
    """The release the container is on once recovered (None: nothing deployed)."""
    gate: GateReport | None
    """The gate of the release it went back to (None: nothing was gated)."""
    replaced: Replaced | None
    """What became of the playbook an interrupted `--replace` had stopped."""


@pydantic.dataclasses.dataclass
class Outcome:
    """What happened on one container; `result` is the contract of --json, and the
    fields in their order are the target's entry in a run's document."""

    name: str
    host: str
    result: TargetResult = "failed"
    release: str | None = None
    previous_release: str | None = None
    server_version: str | None = None
    gate: GateReport | None = None
    rollback_gate: GateReport | None = None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    steps: dict[str, Seconds] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    recovered: Recovered | None = None
    current: str | None = None  # the release `current` points at when the run ends
    diff: Annotated[str | None, OnlyWhenSet] = None
    """With --diff: `diff -u` of current vs new ("" = no change)."""
    replaced: Annotated[Replaced | None, OnlyWhenSet] = None
    """With `deploy --replace`: the other playbook's server it stopped, and what became of it."""
    baseline: Annotated[BaselineRecord | None, OnlyWhenSet] = None
    """`orch baseline`: the record it wrote (the speed levels without speculation)."""
    speed: Annotated[SpeedReport | None, OnlyWhenSet] = None
    """`orch baseline`: the speed levels as measured, with their bounds."""
    decisions: Annotated[list[Decision] | None, OnlyWhenSet] = None
    """With `gate.on_inconclusive: pause`: how each pause of the gate ended (promote,
    abort, retry), who decided and when; `gate` holds the figures decided on."""
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
