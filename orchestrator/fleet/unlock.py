"""`orch unlock`: every selected container's deploy lock removed, saying whose it was;
a live run's lock only when forced."""

from __future__ import annotations

from orchestrator.connections import SSH, Connect
from orchestrator.container import lock
from orchestrator.contract import run_result
from orchestrator.documents.fleet import (
    Unlock,
    Unlocked,
    Unreached,
    lock_holder,
)
from orchestrator.fleet.inputs import Inputs
from orchestrator.fleet.read import fleet_read


def unlock(inputs: Inputs, connect: Connect = SSH, force: bool = False) -> tuple[Unlock, int]:
    """Every container's lock removed (saying whose it was), reachable or not; a live
    run's lock only with `force` (else that container's entry says whose it is, exit 3)."""
    read = fleet_read(
        inputs, connect, lambda transport, plan: lock.remove(transport, plan.layout, force)
    )
    targets: list[Unlocked | Unreached] = read.entries(
        lambda plan, owner: Unlocked(
            name=plan.container, host=plan.host, removed_lock=lock_holder(owner)
        ),
        lambda plan, exc: Unreached(
            name=plan.container,
            host=plan.host,
            result="error",
            error=exc.message_for(plan.container),
        ),
    )
    code = max((e.exit_code for e in read.group.failed.values()), default=0)
    return Unlock(playbook=inputs.playbook.name, result=run_result(code), targets=targets), code
