"""Deploys across containers: canaries first, then waves, within a failure budget.

`parallel`, `canary` and `max_failures` are counts or percentages of the
containers in the run ("25%"), rounded down as Ansible's `serial` rounds, with
at least one container per wave (and per canary, when the share is not 0).
The run stops starting new containers once more than `max_failures` have
failed; those not started are reported as `skipped`. An optional `pause`
waits between waves, never after the last or once the budget is spent.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import field
from typing import Annotated, TypeVar

import pydantic
from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from orchestrator.durations import Seconds
from orchestrator.errors import OrchError
from orchestrator.fanout import fan_out
from orchestrator.playbook import Rollout
from orchestrator.transaction.outcome import Outcome

T = TypeVar("T")


def share(value: int | str, total: int, at_least_one: bool = False) -> int:
    """A count as given, or a percentage of `total` rounded down; with `at_least_one`,
    a percentage above 0 of a non-empty run is never less than one."""
    if isinstance(value, int):
        return value
    percent = float(value.rstrip("%"))
    count = int(total * percent / 100)
    return max(1, count) if at_least_one and percent > 0 and total else count


@pydantic.dataclasses.dataclass(frozen=True)
class RolloutPlan:
    """A rollout's settings resolved against the number of containers."""

    canary: int
    parallel: int
    max_failures: int
    pause: float | None

    @classmethod
    def of(cls, rollout: Rollout, total: int) -> RolloutPlan:
        return cls(
            canary=share(rollout.canary, total, at_least_one=True),
            parallel=max(1, share(rollout.parallel, total, at_least_one=True)),
            max_failures=share(rollout.max_failures, total),
            pause=rollout.pause,
        )


def waves(items: Sequence[T], plan: RolloutPlan) -> list[list[T]]:
    """Canaries one at a time, then the rest `parallel` at a time."""
    canaries = [[item] for item in items[: plan.canary]]
    rest = items[plan.canary :]
    step = plan.parallel
    return canaries + [list(rest[i : i + step]) for i in range(0, len(rest), step)]


@pydantic.dataclasses.dataclass(config=ConfigDict(serialize_by_alias=True))
class Wave:
    """One wave as it ran: its containers, their results, its wall time."""

    number: Annotated[int, Field(serialization_alias="wave")]
    kind: str  # "canary" or "wave"
    names: Annotated[list[str], Field(serialization_alias="targets")]
    results: dict[str, int] = field(default_factory=dict)
    seconds: Seconds = 0.0
    paused: Seconds = 0.0  # seconds waited after this wave, before the next


@pydantic.dataclasses.dataclass
class RolloutRun:
    plan: RolloutPlan
    outcomes: Annotated[list[Outcome], Field(exclude=True)]
    waves: list[Wave]

    @model_serializer(mode="wrap")
    def _settings_first(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """The plan's settings stand flat beside the waves they made: `rollout.canary`."""
        fields = handler(self)
        return {**fields.pop("plan"), **fields}


def run_rollout(
    names: Sequence[str],
    rollout: Rollout,
    run_one: Callable[[str], Outcome],
    skipped: Callable[[str], Outcome],
    unreached: Callable[[str, OrchError], Outcome],
    sleep: Callable[[float], None] = time.sleep,
) -> RolloutRun:
    plan = RolloutPlan.of(rollout, len(names))
    outcomes: dict[str, Outcome] = {}
    failures = 0
    ran: list[Wave] = []
    batches = waves(list(names), plan)
    for number, batch in enumerate(batches, 1):
        wave = Wave(number, "canary" if number <= plan.canary else "wave", batch)
        ran.append(wave)
        started = time.monotonic()
        if failures > plan.max_failures:
            outcomes.update({name: skipped(name) for name in batch})
        else:
            group = fan_out(batch, run_one, len(batch))
            outcomes.update(group.succeeded)
            outcomes.update({name: unreached(name, exc) for name, exc in group.failed.items()})
            failures += sum(outcomes[name].exit_code != 0 for name in batch)
        wave.seconds = time.monotonic() - started
        wave.results = dict(Counter(outcomes[name].result for name in batch))
        if plan.pause and number < len(batches) and failures <= plan.max_failures:
            sleep(plan.pause)
            wave.paused = plan.pause
    return RolloutRun(plan, [outcomes[name] for name in names], ran)
