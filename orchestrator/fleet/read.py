"""The read-only commands' skeleton: connect, read every container side by side, close;
per container, what the read returned or the error that stopped it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from orchestrator.connections import Connect, Pool
from orchestrator.documents.fleet import (
    Unreached,
)
from orchestrator.errors import OrchError
from orchestrator.fanout import READ_PARALLEL, GroupResult, fan_out
from orchestrator.fleet.inputs import Inputs
from orchestrator.plan import TargetPlan
from orchestrator.transport.base import Transport

T = TypeVar("T")


E = TypeVar("E")


def read_each(
    connections: Pool, plans: dict[str, TargetPlan], read: Callable[[Transport, TargetPlan], T]
) -> GroupResult[T]:
    """`read` on every container, side by side."""
    return fan_out(
        list(plans), lambda name: read(connections.container(name), plans[name]), READ_PARALLEL
    )


@dataclass(frozen=True)
class FleetRead(Generic[T]):
    """What a read of every container found: per container, what `read` returned or
    the error that stopped it."""

    plans: dict[str, TargetPlan]
    group: GroupResult[T]

    def entries(
        self, found: Callable[[TargetPlan, T], E], failed: Callable[[TargetPlan, OrchError], E]
    ) -> list[E]:
        """One document entry per container, in the inventory's order."""
        return [
            found(plan, self.group.succeeded[name])
            if name in self.group.succeeded
            else failed(plan, self.group.failed[name])
            for name, plan in self.plans.items()
        ]


def fleet_read(
    inputs: Inputs, connect: Connect, read: Callable[[Transport, TargetPlan], T]
) -> FleetRead[T]:
    """The read-only commands' skeleton: connect, read every container, close."""
    plans = {p.container: p for p in inputs.plans}
    with connect(inputs.inventory, None) as connections:
        return FleetRead(plans, read_each(connections, plans, read))


def unreachable(plan: TargetPlan, exc: OrchError) -> Unreached:
    return Unreached(
        name=plan.container,
        host=plan.host,
        result="unreachable",
        error=exc.message_for(plan.container),
    )
