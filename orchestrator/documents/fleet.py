"""The documents of the commands that read every container of a fleet: status,
releases, verify-config, unlock (which removes a lock, nothing else), promote, abort and
retry (which write a decision for a paused run, nothing else), doctor and logs;
and a run's own log (RunLog). Each lists its containers under `targets`, name (and
host) first; one the read did not get through to says what stopped it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, Field

from orchestrator import runlog
from orchestrator.container.lock import Owner
from orchestrator.container.pause import Choice, Decision
from orchestrator.contract import CheckStatus, Document, OnlyWhenSet, RunResult, TargetState
from orchestrator.drafters.findings import Finding
from orchestrator.release import Applied


@pydantic.dataclasses.dataclass(frozen=True)
class Check:
    target: Annotated[str, Field(exclude=True)]
    """The host or container checked: the doctor's document lists its checks under it."""
    check: str
    status: CheckStatus
    """`info`: informational, never fails the doctor."""
    detail: str
    fix: str = ""


class ContainerLog(BaseModel):
    """One container's last lines (`log`: the file they are from), or why there are
    none: a `note` when it has no log yet, an `error` when it could not be read."""

    name: str
    host: str
    result: Literal["ok", "unreachable", "error"]
    log: str | None
    lines: list[str]
    note: Annotated[str | None, OnlyWhenSet] = None
    error: Annotated[str | None, OnlyWhenSet] = None


class FleetTarget(BaseModel):
    """A container as a fleet read lists it."""

    name: str
    host: str


class FleetDocument(Document):
    """What a fleet read's document says first: the playbook read for and the result."""

    playbook: str
    result: RunResult


class Unreached(FleetTarget):
    """A container the read did not get through to (`unlock` says `error`: it stops
    nothing else)."""

    result: Literal["unreachable", "error"]
    error: str


AuditSummary = dict[str, Any] | None
"""A run as the container's audit log records it (container/audit.py): its values are
given as the version of orch that wrote the line recorded them, numbers included."""


class LockOwner(BaseModel):
    """A lock orch took: the run, who, from where (and its process there), since when."""

    run_id: str
    user: str
    control_host: str
    pid: int | None
    since: str
    """ISO 8601, UTC."""
    lease: float | None = None
    """The holder's lease in seconds (null in a lock an older orch wrote)."""
    boot_id: str | None = None
    """The control host's boot when the lock was taken: a PID means nothing across boots."""
    pid_start: int | None = None
    """The PID's start time, so a later process with the same PID is not taken as it."""


class ForeignLock(BaseModel):
    """An owner file orch did not write: its text."""

    text: str


LockHolder = LockOwner | ForeignLock | None
"""Whose a lock is; None when there is none."""


def lock_holder(text: str) -> LockHolder:
    """The owner file's text as a document field."""
    if not text.strip():
        return None
    owner = Owner.parse(text)
    if owner is None:
        return ForeignLock(text=text.strip())
    since = datetime.fromtimestamp(owner.since, UTC).isoformat()
    return LockOwner(
        run_id=owner.run_id,
        user=owner.user,
        control_host=owner.control_host,
        pid=owner.pid,
        since=since,
        lease=owner.lease,
        boot_id=owner.boot_id,
        pid_start=owner.pid_start,
    )


class Deploying(BaseModel):
    """The run holding a container's lock: the step its journal says (None before its
    switch begins, or when the journal is unreadable), who, and for how long (s)."""

    run_id: str
    step: str | None
    owner: str
    elapsed: float
    paused_since: Annotated[str | None, OnlyWhenSet] = None
    """Only when its gate paused for a decision: since when (ISO 8601, UTC)."""
    decide: Annotated[dict[Choice, str] | None, OnlyWhenSet] = None
    """Only when paused: the commands that decide (promote, abort, retry), as they run."""


class StatusTarget(FleetTarget):
    """Where one container stands: its release and server, the gate that admitted the
    release, the last run, the lock, and a run at work or interrupted there."""

    release: str | None
    server: str
    pid: int | None
    release_gate: AuditSummary
    last_run: AuditSummary
    lock: LockHolder
    deploying: Deploying | None
    interrupted: str | None
    health: int | None
    """/health's status; None when the server is not running or did not answer."""
    error: Annotated[str | None, OnlyWhenSet] = None
    """Only when `current` names a release whose dir is missing."""
    log_end: Annotated[str | None, OnlyWhenSet] = None
    """Only when the recorded server's process is gone (`crashed`): its log's last line
    (its exit status is not recorded: the log says why it ended)."""
    state: TargetState


class UnreachedStatus(FleetTarget):
    """A container status could not read: a state, as status lists states."""

    state: Literal["unreachable"] = "unreachable"
    error: str


class Status(FleetDocument):
    kind: Literal["Status"] = "Status"
    state: TargetState
    """The fleet's: the most pressing of its containers' states."""
    targets: list[StatusTarget | UnreachedStatus]


ReleaseState = Literal["current", "kept", "pruned", "none"]
"""Where a run's release is now on its container (`none`: the run left nothing serving)."""


class LeftOn(BaseModel):
    """The release a run left one container on, and whether it is still there."""

    name: str
    result: str | None
    release: str | None
    release_state: ReleaseState


class RecordedFleetRun(BaseModel):
    """A run as the containers' audit logs record it."""

    run_id: str
    time: str
    user: str
    action: str
    targets: list[LeftOn]


class KeptReleaseEntry(BaseModel):
    """A release dir kept on a container, and whether a listed run left it current."""

    release: str
    created: str | None
    made_by_run: str | None
    current: bool
    named_by_a_run: bool


class ReleasesTarget(FleetTarget):
    result: Literal["ok"] = "ok"
    current: str | None
    kept: list[KeptReleaseEntry]
    """Newest first."""


class Releases(FleetDocument):
    kind: Literal["Releases"] = "Releases"
    runs: list[RecordedFleetRun]
    """Newest first."""
    targets: list[ReleasesTarget | Unreached]


class VerifyTarget(FleetTarget):
    """What every checked container says first: a run interrupted there (only when one
    was), and its current release."""

    interrupted: Annotated[str | None, OnlyWhenSet] = None
    release: str | None


class NothingToVerify(VerifyTarget):
    """A container with nothing deployed: nothing there can have drifted."""

    result: Literal["ok"] = "ok"
    state: Literal["nothing_deployed"] = "nothing_deployed"


class Verified(VerifyTarget):
    """A current release checked against its manifest (hand edits), against a fresh
    render of the playbook (what a deploy would change), and by the drafter checks."""

    applied: Applied | None
    """The release's manifest; None when it is unreadable."""
    changed_on_target: list[str]
    playbook_differs: list[str]
    findings: list[Finding]
    result: Literal["ok", "drift"]
    apply_with: Annotated[str | None, OnlyWhenSet] = None
    """The deploy that applies what the playbook now renders differently."""
    server_check_reused: Annotated[str | None, OnlyWhenSet] = None
    """When and by which run the passing verdict of the server check was reached, when
    it was reused instead of checking the launch again (`--recheck` checks again)."""


class Verify(FleetDocument):
    kind: Literal["Verify"] = "Verify"
    targets: list[Verified | NothingToVerify | Unreached]


class Unlocked(FleetTarget):
    result: Literal["ok"] = "ok"
    removed_lock: LockHolder


class Unlock(FleetDocument):
    kind: Literal["Unlock"] = "Unlock"
    targets: list[Unlocked | Unreached]


class DecidedTarget(FleetTarget):
    """A paused run's container, the decision written beside its lock for that run to
    act on at its next poll."""

    result: Literal["ok"] = "ok"
    run_id: str
    release: str
    """The release the paused gate judged (serving while paused)."""
    decision: Decision


class NothingPaused(FleetTarget):
    """A selected container where no run is paused, while another container's run got
    the decision: passed by, saying what is there instead."""

    result: Literal["skipped"] = "skipped"
    note: str


class Decide(FleetDocument):
    """`orch promote|abort|retry`: the decision for each selected container's paused run."""

    kind: Literal["Decide"] = "Decide"
    decision: Choice
    targets: list[DecidedTarget | NothingPaused | Unreached]


class CheckedTarget(BaseModel):
    """A host or container with its checks, in the order they ran."""

    name: str
    result: Literal["ok", "error"]
    checks: list[Check]


class Doctor(Document):
    kind: Literal["Doctor"] = "Doctor"
    result: RunResult
    targets: list[CheckedTarget]

    @classmethod
    def of(cls, checks: list[Check]) -> Doctor:
        """The checks grouped per host or container, each in the order first checked."""
        grouped = {
            name: [c for c in checks if c.target == name]
            for name in dict.fromkeys(c.target for c in checks)
        }
        targets = [
            CheckedTarget(
                name=name,
                result="error" if any(c.status == "fail" for c in own) else "ok",
                checks=own,
            )
            for name, own in grouped.items()
        ]
        failed = any(t.result == "error" for t in targets)
        return cls(result="needs_attention" if failed else "ok", targets=targets)


class Logs(FleetDocument):
    kind: Literal["Logs"] = "Logs"
    targets: list[ContainerLog]


class RunLog(Document):
    """`orch history --show RUN --json`: the run's log on this machine."""

    kind: Literal["RunLog"] = "RunLog"
    result: RunResult = "ok"
    run_id: str
    path: str
    lines: list[str]

    @classmethod
    def of(cls, run_id: str, steps: bool) -> RunLog:
        """The log of the run `run_id` names (a unique prefix will do); with `steps`,
        only its steps and results."""
        log = runlog.read(run_id)
        lines = runlog.steps_only(log.lines) if steps else log.lines
        return cls(run_id=log.run_id, path=str(log.path), lines=lines)
