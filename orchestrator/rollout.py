"""Deploys across containers: canaries first, then batches, within a failure budget.

The run stops starting new containers once more than `max_failures` have
failed; those not started are reported as `skipped`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from orchestrator.deploy import Outcome
from orchestrator.errors import OrchError
from orchestrator.fanout import fan_out
from orchestrator.playbook import Rollout

T = TypeVar("T")


def waves(items: Sequence[T], rollout: Rollout) -> list[list[T]]:
    """Canaries one at a time, then the rest `parallel` at a time."""
    canaries = [[item] for item in items[: rollout.canary]]
    rest = items[rollout.canary :]
    step = rollout.parallel
    return canaries + [list(rest[i : i + step]) for i in range(0, len(rest), step)]


def run_rollout(
    names: Sequence[str],
    rollout: Rollout,
    run_one: Callable[[str], Outcome],
    skipped: Callable[[str], Outcome],
    unreached: Callable[[str, OrchError], Outcome],
) -> list[Outcome]:
    outcomes: dict[str, Outcome] = {}
    failures = 0
    for wave in waves(list(names), rollout):
        if failures > rollout.max_failures:
            outcomes.update({name: skipped(name) for name in wave})
            continue
        group = fan_out(wave, run_one, len(wave))
        outcomes.update(group.succeeded)
        outcomes.update({name: unreached(name, exc) for name, exc in group.failed.items()})
        failures += sum(outcomes[name].exit_code != 0 for name in wave)
    return [outcomes[name] for name in names]
