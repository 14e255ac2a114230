"""The recovery of a run that died in its switch, found in the journal when the next
run takes the lock: what was gated is kept, the rest undone; an interrupted stop or
remove is finished; an interrupted `--replace` settles the replaced playbook; a journal
that cannot be read is inferred from the container itself."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import pydantic

from orchestrator.baseline import is_baseline
from orchestrator.container import journal, store
from orchestrator.container.journal import GATE_PASSED, UNKNOWN_RUN, Transaction, Unreadable
from orchestrator.deadline import now
from orchestrator.errors import NeedsAttention
from orchestrator.gate import GateReport
from orchestrator.transaction import replace
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.outcome import Recovered, Replaced
from orchestrator.transaction.switch import go_back

RecoveryResult = Literal["stopped", "removed", "recovered"]
FINISHED_ON_RECOVERY: dict[str, RecoveryResult] = {"stop": "stopped", "remove": "removed"}
"""Interrupted actions the next run finishes rather than undoes, with the result it records."""


@pydantic.dataclasses.dataclass(frozen=True)
class RecoveryRecord:
    """What the container's audit log records of a recovery."""

    result: RecoveryResult
    release: str | None
    current: str | None
    previous_release: str
    gate: GateReport | None
    interrupted_run: str


@contextmanager
def locked(d: Deployment, settling_for: str | None = None) -> Iterator[None]:
    """Hold the lock (taking over a gone owner's) and recover a run that died in its
    switch before this run's own work; the lock is released whatever happens.
    `settling_for`: the playbook whose interrupted --replace this run is recovering
    (and takes this lock to settle): its journal is not recovered a second time."""
    with d.lock.held() as taken_over:
        if taken_over:
            d.outcome.notes.append(taken_over)
            d.note(taken_over)
        recover_replacing(d, settling_for)
        recover(d)
        yield


def recover_replacing(d: Deployment, settling_for: str | None = None) -> None:
    """A run of a playbook whose server an interrupted `deploy --replace` stopped: that
    run's deployment is recovered first, under its lock, settling this one (whose lock
    this run holds) as that run's own next run would."""
    for name, interrupted in journal.replacing(d.transport, d.layout).items():
        if name == settling_for:
            continue
        replacer = d.neighbours(name)
        if replacer is None:
            raise NeedsAttention(
                f"interrupted run {interrupted.run_id} of {name} stopped {d.plan.playbook}'s "
                f"server to replace it, and {name}'s playbook cannot be loaded here to "
                f"recover it: `orch deploy {name} -i {d.options.inventory} --limit {d.name}` "
                "recovers both",
                subject=d.name,
            )
        d.note(f"recover {name}'s interrupted --replace of {d.plan.playbook}")
        with replacer.lock.held() as taken_over:
            if taken_over:
                d.outcome.notes.append(f"{name}: {taken_over}")
            try:
                recover(replacer, replaced_held=d)
            finally:
                d.outcome.notes.extend(f"{name}: {note}" for note in replacer.outcome.notes)
        d.outcome.recovered = replacer.outcome.recovered


def recover(d: Deployment, replaced_held: Deployment | None = None) -> None:
    """A journal left by a run that died in its switch: keep what was gated, undo
    the rest, before this run does its own work. `replaced_held`: the deployment an
    interrupted --replace stopped, its lock already held by this run."""
    found = d.journal.read()
    if found is None:
        return
    interrupted = found if isinstance(found, Transaction) else infer(d, found)
    if interrupted is None:
        return
    d.note(f"recover interrupted {interrupted.describe()}")
    d.journal.active = interrupted
    back_on: str | None
    report: GateReport | None = None
    finished = interrupted.action in FINISHED_ON_RECOVERY
    if finished:
        back_on = _finish_interrupted(d, interrupted)
    elif interrupted.gated:
        d.record_previous(interrupted.from_release, interrupted.to_release)
        back_on = interrupted.to_release
    else:
        report = go_back(d, interrupted.from_release, interrupted.stopped_on)
        back_on = interrupted.from_release or interrupted.stopped_on
        if is_baseline(interrupted.to_release):  # never left behind, never a rollback target
            store.prune(d.transport, d.layout, [interrupted.to_release])
    replaced = _settle_replaced(d, interrupted, replaced_held)
    d.audit(
        "recover",
        RecoveryRecord(
            FINISHED_ON_RECOVERY.get(interrupted.action, "recovered"),
            back_on,
            back_on,
            interrupted.to_release,
            report,
            interrupted.run_id,
        ),
    )
    d.journal.clear()
    d.outcome.recovered = Recovered(
        None if isinstance(found, Transaction) else interrupted.owner,
        interrupted.run_id,
        interrupted.started,
        interrupted.action,
        interrupted.step,
        interrupted.from_release,
        interrupted.to_release,
        back_on,
        report,
        replaced,
    )
    d.outcome.notes.append(
        f"recovered interrupted run {interrupted.run_id} (stopped at '{interrupted.step}'): "
        + (
            f"finished its {interrupted.action}"
            if finished
            else f"kept {interrupted.to_release}, which had passed its gate"
            if interrupted.gated
            else f"now on {interrupted.from_release}"
            if interrupted.from_release
            else f"its server stopped, back on {back_on} (as before that run)"
            if back_on
            else "its server stopped, nothing to go back to"
        )
    )
    if report is not None and not d.admits(report):
        raise NeedsAttention(
            f"recovering interrupted run {interrupted.run_id}: "
            f"{back_on} did not pass its gate: {report.verdict.reason}",
            subject=d.name,
        )
    if replaced and replaced.result == "failed":
        raise NeedsAttention(
            f"recovering interrupted run {interrupted.run_id}: {replaced.playbook} "
            f"was not restored: {replaced.error}",
            subject=d.name,
        )


def _settle_replaced(
    d: Deployment, interrupted: Transaction, held: Deployment | None
) -> Replaced | None:
    """An interrupted replace: the other deployment stays stopped if the new release
    had passed, else it is started again and gated. `held`: that deployment, its lock
    held by this run already."""
    if not interrupted.replaced:
        return None
    name, release_id = interrupted.replaced["playbook"], interrupted.replaced["release"]
    if held is not None:
        return _settle(held, interrupted.gated, release_id, d.plan.playbook)
    other = d.neighbours(interrupted.replaced.get("file") or name) or d.neighbours(name)
    if other is None:
        raise NeedsAttention(
            f"interrupted run {interrupted.run_id} stopped {name}'s server to replace it, "
            f"and {name}'s playbook cannot be loaded here to settle it: "
            f"`orch start {name} -i {d.options.inventory} --limit {d.name}`",
            subject=d.name,
        )
    with locked(other, settling_for=d.plan.playbook):
        return _settle(other, interrupted.gated, release_id, d.plan.playbook)


def _settle(other: Deployment, gated: bool, release_id: str, by: str) -> Replaced:
    if gated:
        return replace.stay_stopped(other, release_id, by)
    return replace.restore(other, release_id, by)


def _finish_interrupted(d: Deployment, interrupted: Transaction) -> str | None:
    """A stop or remove that died half way is finished, as its operator asked:
    the server stopped by its PID (and the deployment removed). Returns the
    release left current."""
    d.stop_server()
    if interrupted.action == "remove":
        store.remove_deployment(d.transport, d.layout)
        return None
    return interrupted.from_release


def infer(d: Deployment, unreadable: Unreadable) -> Transaction | None:
    """The interrupted transaction as the container shows it, for a journal that
    cannot be read: `current` is where its switch got to; the release the last
    recorded run left current on (the audit) is where it started; a server
    running on that same release means nothing was left to undo. Says so."""
    records = store.read_records(d.transport, d.layout)
    started_on = next((r.current for r in reversed(records.audit) if r.current), None)
    current = records.current
    server = d.server().state()
    taken = d.lock.taken_from
    run_id = taken.run_id if taken else UNKNOWN_RUN
    origin = started_on or current
    seen = (
        f"{unreadable.describe()}; inferred from the container: current names "
        f"{current or 'nothing'}, the audit's last run left {started_on or 'nothing'} "
        f"current, the server is {server.status}" + (f" (pid {server.pid})" if server.pid else "")
    )
    kept = current is not None and current == origin and server.running
    verdict = "nothing to undo" if kept else f"going back to {origin or 'nothing'}"
    d.outcome.notes.append(f"{seen}: {verdict}")
    d.note(f"{seen}: {verdict}")
    if current is None and origin is None:
        d.journal.clear()
        return None
    stamp = now()
    return Transaction(
        run_id,
        "unknown",
        f"{seen}: {verdict}",
        origin,
        current or origin or "",
        GATE_PASSED if kept else "unknown",
        stamp,
        stamp,
    )
