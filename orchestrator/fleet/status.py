"""`orch status`: where each container stands. What is read of a container (its
StatusFacts) is judged apart from the reading, by pure functions over those facts:
the container's state, whether it is as someone meant it, and the fleet's state."""

from __future__ import annotations

import time
from dataclasses import dataclass

from orchestrator.connections import SSH, Connect
from orchestrator.container import pause
from orchestrator.container.journal import Journal, Transaction, Unreadable
from orchestrator.container.lock import Owner
from orchestrator.container.pause import PAUSED, Choice
from orchestrator.container.server import Server
from orchestrator.container.status import read_status
from orchestrator.contract import TargetState, run_result
from orchestrator.documents.fleet import (
    AuditSummary,
    Deploying,
    Status,
    StatusTarget,
    UnreachedStatus,
    lock_holder,
)
from orchestrator.errors import OrchError
from orchestrator.fleet.inputs import Inputs
from orchestrator.fleet.read import fleet_read
from orchestrator.plan import TargetPlan
from orchestrator.transport.base import Transport


@dataclass(frozen=True)
class StatusFacts:
    """What status read of one container that its state is judged by."""

    release: str | None
    """The release `current` points at; None when nothing was ever deployed."""
    release_missing: bool
    """`current` names a release whose dir is gone."""
    server: str
    """The recorded server: `running`, `stopped` (its PID recorded, its process gone:
    `orch stop` removes the record) or `none`."""
    deploying: Deploying | None
    """A live run holding the lock."""
    interrupted: str | None
    """A transaction whose run is provably gone, as its journal describes it."""
    health: int | None
    """/health's status when the server runs; None when it did not answer."""


def target_state(facts: StatusFacts) -> TargetState:
    """One container's state: an interrupted transaction first, then a missing release
    (not serving it), a run at work (`paused` when its gate waits for a decision), the
    server: `stopped` by orch (no record left), `crashed` when its recorded process is
    gone."""
    if facts.interrupted:
        return "interrupted"
    if facts.release_missing:
        return "unhealthy" if facts.server == "running" else "stopped"
    if facts.deploying:
        return "paused" if facts.deploying.step == PAUSED else "deploying"
    if facts.release is None and facts.server != "running":
        return "nothing_deployed"
    if facts.server == "stopped":
        return "crashed"
    if facts.server == "none":
        return "stopped"
    return "serving" if facts.health == 200 else "unhealthy"


def as_meant(state: TargetState, last_run: AuditSummary) -> bool:
    """Serving, nothing deployed yet, a run at work, or stopped by `orch stop` (its last
    run a stop, or an interrupted stop finished): no one needs to look. A paused run
    waits for someone's decision."""
    if state in ("serving", "nothing_deployed", "deploying"):
        return True
    last = last_run or {}
    return state == "stopped" and (last.get("action") == "stop" or last.get("result") == "stopped")


STATE_ORDER = (
    "interrupted",
    "unreachable",
    "crashed",
    "stopped",
    "unhealthy",
    "paused",
    "deploying",
    "serving",
    "nothing_deployed",
)
"""The states, most pressing first."""


def fleet_state(states: list[TargetState]) -> TargetState:
    """The fleet's state: nothing deployed only when that holds everywhere, else the
    most pressing of its containers' states."""
    if states and set(states) == {"nothing_deployed"}:
        return "nothing_deployed"
    return min(states, key=STATE_ORDER.index, default="nothing_deployed")


def status(inputs: Inputs, connect: Connect = SSH) -> tuple[Status, int]:
    """Where each container stands. Nothing deployed yet is a state, not a problem; a run
    in progress is `deploying`, not a fault."""
    read = fleet_read(
        inputs, connect, lambda transport, plan: _status_entry(transport, plan, inputs)
    )
    targets: list[StatusTarget | UnreachedStatus] = read.entries(
        lambda _, entry: entry,
        lambda plan, exc: UnreachedStatus(
            name=plan.container, host=plan.host, error=exc.message_for(plan.container)
        ),
    )
    meant = [
        as_meant(t.state, t.last_run if isinstance(t, StatusTarget) else None) for t in targets
    ]
    code = 0 if all(meant) else 3
    return Status(
        playbook=inputs.playbook.name,
        result=run_result(code),
        state=fleet_state([t.state for t in targets]),
        targets=targets,
    ), code


def _status_entry(transport: Transport, plan: TargetPlan, inputs: Inputs) -> StatusTarget:
    """The journal first: a transaction whose run is provably gone is the first thing to
    know; one whose run still holds the lock is that run at work."""
    journal = Journal(transport, plan.layout).read()
    entry = read_status(transport, plan.layout)
    owner = Owner.parse(entry.lock or "")
    # Status reads no heartbeat: a lock is live unless its owner's process on this
    # machine is provably gone (the lease is the deploy's to judge, on the container).
    live = owner if owner and owner.gone(0.0) is None else None
    server = Server(transport, plan.layout, plan.address, plan.port)
    facts = StatusFacts(
        release=entry.release,
        release_missing=entry.release_missing,
        server=entry.server,
        deploying=_deploying(live, journal, decide(inputs, plan.container)) if live else None,
        interrupted=journal.describe() if journal and not live else None,
        health=_health(server) if entry.server == "running" else None,
    )
    missing = f"current points at release {entry.release}, whose dir is missing"
    return StatusTarget(
        name=plan.container,
        host=plan.host,
        release=facts.release,
        server=facts.server,
        pid=entry.pid,
        release_gate=entry.release_gate,
        last_run=entry.last_run,
        lock=lock_holder(str(entry.lock or "")),
        deploying=facts.deploying,
        interrupted=facts.interrupted,
        health=facts.health,
        error=missing if facts.release_missing else None,
        log_end=entry.log_end,
        state=target_state(facts),
    )


def _deploying(
    owner: Owner, journal: Transaction | Unreadable | None, commands: dict[Choice, str]
) -> Deploying:
    """The run holding the lock, and the step its journal says when it is that run's
    (paused: since when, and the `commands` that decide)."""
    mine = isinstance(journal, Transaction) and journal.run_id == owner.run_id
    step = journal.step if mine and isinstance(journal, Transaction) else None
    paused = isinstance(journal, Transaction) and step == PAUSED
    return Deploying(
        run_id=owner.run_id,
        step=step,
        owner=f"{owner.user}@{owner.control_host}",
        elapsed=round(max(0.0, time.time() - owner.since), 1),
        paused_since=journal.updated if paused and isinstance(journal, Transaction) else None,
        decide=commands if paused else None,
    )


def decide(inputs: Inputs, container: str) -> dict[Choice, str]:
    """The commands that decide for a paused run there, with the paths given here."""
    return pause.commands(inputs.playbook_ref, str(inputs.inventory_path), container)


def _health(server: Server) -> int | None:
    """/health's status; None when it did not answer at all."""
    try:
        return server.health()
    except OrchError:
        return None
