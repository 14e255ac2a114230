"""Rollout order and failure budget, with plain functions standing in for deploys."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection

import pytest

from orchestrator.deploy import Outcome
from orchestrator.errors import NeedsAttention, OrchError
from orchestrator.playbook import Rollout
from orchestrator.rollout import run_rollout, waves

NAMES = ["a", "b", "c", "d", "e", "f", "g"]


@pytest.mark.parametrize(
    ("canary", "parallel", "shape"),
    [
        (1, 1, [["a"], ["b"], ["c"], ["d"], ["e"], ["f"], ["g"]]),
        (1, 3, [["a"], ["b", "c", "d"], ["e", "f", "g"]]),
        (2, 4, [["a"], ["b"], ["c", "d", "e", "f"], ["g"]]),
        (0, 10, [NAMES]),
        (0, 3, [["a", "b", "c"], ["d", "e", "f"], ["g"]]),
        (9, 2, [[name] for name in NAMES]),
    ],
)
def test_waves(canary: int, parallel: int, shape: list[list[str]]) -> None:
    assert waves(NAMES, Rollout(canary=canary, parallel=parallel)) == shape


def test_no_containers_no_waves() -> None:
    assert waves([], Rollout()) == []


def no_wait(name: str) -> None:
    return None


class Deploys:
    """run_one and skipped for run_rollout: the containers in `failing` fail (exit 1)."""

    def __init__(
        self,
        failing: Collection[str] = (),
        wait: Callable[[str], None] = no_wait,
        unreachable: Collection[str] = (),
    ) -> None:
        self.failing, self.unreachable = failing, unreachable
        self.wait = wait
        self.started: list[str] = []

    def run_one(self, name: str) -> Outcome:
        self.started.append(name)
        self.wait(name)
        if name in self.unreachable:
            raise NeedsAttention(f"{name}: connect: refused")
        if name in self.failing:
            return Outcome(name, "pve", result="rolled_back", exit_code=1)
        return Outcome(name, "pve", result="deployed")

    @staticmethod
    def skipped(name: str) -> Outcome:
        return Outcome(name, "pve", result="skipped")

    @staticmethod
    def unreached(name: str, exc: OrchError) -> Outcome:
        return Outcome(name, "pve", result="unreached", error=str(exc), exit_code=exc.exit_code)

    def run(self, rollout: Rollout, names: list[str] = NAMES) -> list[tuple[str, str]]:
        outcomes = run_rollout(names, rollout, self.run_one, self.skipped, self.unreached)
        return [(outcome.name, outcome.result) for outcome in outcomes]


def test_all_succeed_in_order() -> None:
    deploys = Deploys()
    assert deploys.run(Rollout(canary=1, parallel=3)) == [(n, "deployed") for n in NAMES]
    assert sorted(deploys.started) == NAMES


def test_a_failed_canary_with_no_budget_starts_nothing_else() -> None:
    deploys = Deploys({"a"})

    results = deploys.run(Rollout(canary=1, parallel=2, max_failures=0))

    assert deploys.started == ["a"]
    assert results == [("a", "rolled_back")] + [(n, "skipped") for n in NAMES[1:]]


def test_the_wave_that_spends_the_budget_finishes_and_no_new_wave_starts() -> None:
    deploys = Deploys({"a", "d"})

    results = deploys.run(Rollout(canary=1, parallel=2, max_failures=1))

    assert sorted(deploys.started) == ["a", "b", "c", "d", "e"]
    assert dict(results) == {
        "a": "rolled_back",
        "b": "deployed",
        "c": "deployed",
        "d": "rolled_back",
        "e": "deployed",
        "f": "skipped",
        "g": "skipped",
    }
    assert [name for name, _ in results] == NAMES


def test_failures_within_the_budget_do_not_stop_the_rollout() -> None:
    deploys = Deploys({"a", "c"})
    results = deploys.run(Rollout(canary=1, parallel=3, max_failures=2))
    assert sorted(deploys.started) == NAMES
    assert [name for name, result in results if result == "rolled_back"] == ["a", "c"]


def test_a_wave_runs_its_containers_at_the_same_time() -> None:
    together = threading.Barrier(3, timeout=5)

    def wait(name: str) -> None:
        if name != "a":  # the canary runs alone
            together.wait()

    deploys = Deploys(wait=wait)
    assert deploys.run(Rollout(canary=1, parallel=3)) == [(n, "deployed") for n in NAMES]


def test_an_unreachable_container_is_its_own_failure_and_counts_against_the_budget() -> None:
    deploys = Deploys(unreachable={"b"})

    results = deploys.run(Rollout(canary=0, parallel=2, max_failures=0))

    assert results[:2] == [("a", "deployed"), ("b", "unreached")]
    assert {result for _, result in results[2:]} == {"skipped"}
