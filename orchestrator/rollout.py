"""Deploys across containers: canaries first, then batches, within a failure budget.

The run stops starting new containers once more than `max_failures` have
failed; those not started are reported as `skipped`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from orchestrator.deploy import Outcome
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
) -> list[Outcome]:
    outcomes: dict[str, Outcome] = {}
    failures = 0
    for wave in waves(list(names), rollout):
        if failures > rollout.max_failures:
            outcomes.update({name: skipped(name) for name in wave})
            continue
        with ThreadPoolExecutor(max_workers=len(wave)) as pool:
            for name, outcome in zip(wave, pool.map(run_one, wave), strict=True):
                outcomes[name] = outcome
                failures += outcome.exit_code != 0
    return [outcomes[name] for name in names]
