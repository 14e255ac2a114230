"""`deploy --replace`: the other playbook's deployment on the same container, whose
server the deploy stops in its transaction; it stays stopped if the new release
passes, else it is started again and gated with its own recorded settings. Each
function takes the replaced deployment; `by` names the playbook replacing it."""

from __future__ import annotations

from pathlib import Path

from orchestrator.container import store
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.outcome import Restored, StayedStopped
from orchestrator.transaction.switch import switch


def journal_record(other: Deployment | None) -> dict[str, str] | None:
    """What the journal records of the server --replace stops (its shape is the
    journal's, container.journal.Transaction.replaced): None when none runs."""
    if other is None or not other.server().state().running:
        return None
    current = store.linked(other.transport, other.layout.current)
    if current is None:
        return None
    return {
        "playbook": other.plan.playbook,
        "file": str(Path(other.playbook.source).resolve()) if other.playbook.source else "",
        "release": current,
    }


def stop(other: Deployment, by: str) -> None:
    """Stop the replaced deployment's server, for `by`'s deploy --replace."""
    with other.step(f"stop {other.plan.playbook}'s server (replaced by {by})"):
        other.stop_server()


def stay_stopped(other: Deployment, release_id: str, by: str) -> StayedStopped:
    """`by`'s release passed: the replaced deployment stays stopped, as its audit says."""
    out = other.outcome
    out.release = out.previous_release = out.current = release_id
    out.result = "stopped"
    out.notes.append(f"replaced by {by}")
    other.audit("stop")
    return StayedStopped(other.plan.playbook, release_id)


def restore(other: Deployment, release_id: str, by: str) -> Restored:
    """`by`'s release did not pass: the replaced deployment's release started again,
    made ready and gated with its own recorded settings, as its audit says."""
    other.note(f"restore {other.plan.playbook} {release_id}")
    with other.way_back():  # a journal that cannot be written never keeps it stopped
        report = switch(other, release_id, other.gate_target(release_id), phase="restore")
    out = other.outcome
    out.release = out.previous_release = out.current = release_id
    out.gate = report
    passed = other.admits(report)
    out.result = "started" if passed else "failed"
    out.notes.append(f"restored after {by} did not pass")
    other.audit("start")
    return Restored(
        other.plan.playbook,
        release_id,
        "restored" if passed else "failed",
        report,
        None if passed else report.verdict.reason,
    )
