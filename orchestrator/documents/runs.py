"""The documents of the runs that change containers: deploy, rollback, the server
actions (stop, start, restart, remove) and the baseline. Each names the run and its inputs and lists
what happened on every container, as the local history records it too."""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic
from pydantic import BaseModel, Field

from orchestrator.connections import ConnectionUsage
from orchestrator.contract import Action, Document, OnlyWhenSet, RunResult
from orchestrator.durations import Seconds
from orchestrator.rollout import RolloutRun
from orchestrator.runs import Resolution
from orchestrator.transaction.outcome import Outcome

Warnings = Annotated[list[str], Field(exclude_if=lambda warnings: not warnings)]
"""What went wrong beside the run (its log or history could not be written): only
when something did."""


@pydantic.dataclasses.dataclass(frozen=True)
class HookResult:
    event: str
    argv: list[str]
    exit_code: int | None
    """None when it did not run to an exit (could not start, or killed at its timeout)."""
    seconds: Seconds
    error: str | None
    output: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def summary(self) -> str:
        what = self.error or f"exit {self.exit_code}"
        return f"hook {self.event} ({self.argv[0]}): {what} after {self.seconds:.1f} s"


HookResults = Annotated[list[HookResult], Field(exclude_if=lambda ran: not ran)]
"""The playbook's hooks that ran after the run: only when some did."""


class RunDocument(Document):
    """What every run's document has: the run, its inputs and each container's outcome.
    The run's log and warnings come last, after each kind's own fields."""

    playbook: str
    run_id: str
    started: str
    method: str
    drafter: str | None
    model: str
    inventory: str
    """The inventory file's absolute path: `orch history --inventory` selects by it."""
    assignments: list[str]
    result: RunResult
    targets: list[Outcome]


class DeployRun(RunDocument):
    kind: Literal["DeployRun"] = "DeployRun"
    rollout: RolloutRun
    connections: list[ConnectionUsage]
    log: str | None = None
    warnings: Warnings = []
    hooks: HookResults = []


class ServerRun(RunDocument):
    kind: Literal["ServerRun"] = "ServerRun"
    action: Action
    rollout: RolloutRun
    log: str | None = None
    warnings: Warnings = []


class RollbackRun(RunDocument):
    kind: Literal["RollbackRun"] = "RollbackRun"
    to: Annotated[Resolution | None, OnlyWhenSet] = None
    """With `--to`: what it named, and whose state it restores."""
    log: str | None = None
    warnings: Warnings = []
    hooks: HookResults = []


class BaselineRun(RunDocument):
    """`orch baseline`: each target's `baseline` (the record written: the speed levels
    without speculation and their fingerprint), `speed` (the levels as measured),
    `gate` (the gated release's gate once served again), `current` (that release)."""

    kind: Literal["BaselineRun"] = "BaselineRun"
    rollout: RolloutRun
    log: str | None = None
    warnings: Warnings = []


Run = DeployRun | ServerRun | RollbackRun | BaselineRun


class InterruptedTarget(BaseModel):
    """A container where the interrupted run stopped: at which step, the release it
    was switching to, and the one its recovery left current."""

    name: str
    result: Literal["interrupted"] = "interrupted"
    step: str | None
    release: str | None
    current: str | None


class InterruptedRun(Document):
    """A deploy known only from its containers' journals: it died in its switch, before
    recording itself; the run that recovered it records it in the local history."""

    kind: Literal["DeployRun"] = "DeployRun"
    playbook: str
    run_id: str
    started: str
    result: Literal["interrupted"] = "interrupted"
    recovered_by: str
    targets: list[InterruptedTarget]
