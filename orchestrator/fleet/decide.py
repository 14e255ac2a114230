"""`orch promote|abort|retry`: the decision for a run whose gate paused (`gate.
on_inconclusive: pause`), written beside each selected container's lock. Only a live
run of this playbook that holds the lock there, its journal at `paused`, gets one;
any other container says what holds it, and nothing is written there."""

from __future__ import annotations

import getpass
import socket

from orchestrator.connections import SSH, Connect
from orchestrator.container import lock, pause
from orchestrator.container.journal import Journal, Transaction
from orchestrator.container.pause import PAUSED, Choice, Decision
from orchestrator.container.shell import run_step
from orchestrator.contract import run_result
from orchestrator.deadline import now
from orchestrator.documents.fleet import Decide, DecidedTarget, NothingPaused, Unreached
from orchestrator.errors import InputError, OrchError
from orchestrator.fleet.inputs import Inputs
from orchestrator.fleet.read import fleet_read
from orchestrator.plan import TargetPlan
from orchestrator.transport.base import Transport


def decide(
    inputs: Inputs, choice: Choice, connect: Connect = SSH, by: str | None = None
) -> tuple[Decide, int]:
    """`choice` for every selected container's paused run, decided `by` (default: this
    user at this host). Where no run is paused: `skipped` when another container's run
    got the decision, else an error (exit 2: nothing was decided anywhere); a container
    that cannot be reached is an error (exit 3)."""
    decider = by or f"{getpass.getuser()}@{socket.gethostname()}"
    read = fleet_read(
        inputs, connect, lambda transport, plan: _decide(transport, plan, choice, decider)
    )
    failed = read.group.failed
    passed_by = {
        name for name, exc in failed.items() if isinstance(exc, InputError) and read.group.succeeded
    }

    def entry(plan: TargetPlan, exc: OrchError) -> NothingPaused | Unreached:
        if plan.container in passed_by:
            return NothingPaused(name=plan.container, host=plan.host, note=str(exc))
        return Unreached(
            name=plan.container,
            host=plan.host,
            result="error",
            error=exc.message_for(plan.container),
        )

    targets: list[DecidedTarget | NothingPaused | Unreached] = read.entries(
        lambda _, decided: decided, entry
    )
    code = max((e.exit_code for n, e in failed.items() if n not in passed_by), default=0)
    document = Decide(
        playbook=inputs.playbook.name, result=run_result(code), decision=choice, targets=targets
    )
    return document, code


def _decide(transport: Transport, plan: TargetPlan, choice: Choice, by: str) -> DecidedTarget:
    paused = paused_run(transport, plan)
    decision = Decision(paused.run_id, choice, by, now())
    pause.write(transport, plan.layout, decision)
    return DecidedTarget(
        name=plan.container,
        host=plan.host,
        run_id=paused.run_id,
        release=paused.to_release,
        decision=decision,
    )


def paused_run(transport: Transport, plan: TargetPlan) -> Transaction:
    """The transaction of the live run paused on this container: InputError (nothing
    written) when there is none, saying what there is instead."""
    held = run_step(transport, lock.read_lock(plan.layout.lock), "read the lock").text
    journal = Journal(transport, plan.layout).read()
    if not held.strip():
        raise InputError("no run holds the deploy lock here: nothing is paused")
    holder = lock.parse_held(held)
    owner = lock.Owner.parse(holder.owner_text)
    if owner is None:
        raise InputError("the deploy lock is held by an unreadable owner: nothing is paused")
    if not isinstance(journal, Transaction) or journal.run_id != owner.run_id:
        raise InputError(f"{owner} holds the deploy lock, but not paused: nothing to decide")
    if journal.step != PAUSED:
        raise InputError(f"{owner} is at '{journal.step}', not paused: nothing to decide")
    if owner.alive(holder.age) is None:
        raise InputError(
            f"{owner} paused here, but is gone ({owner.gone(holder.age)}): the next deploy "
            "rolls its release back"
        )
    return journal
