"""Rollout order and failure budget, with plain functions standing in for deploys."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection

import pytest

from orchestrator.contract import jsonable
from orchestrator.errors import NeedsAttention, OrchError
from orchestrator.playbook import Rollout
from orchestrator.rollout import RolloutPlan, RolloutRun, run_rollout, share, waves
from orchestrator.transaction.outcome import Outcome

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
    plan = RolloutPlan.of(Rollout(canary=canary, parallel=parallel), len(NAMES))
    assert waves(NAMES, plan) == shape


def test_no_containers_no_waves() -> None:
    assert waves([], RolloutPlan.of(Rollout(), 0)) == []


@pytest.mark.parametrize(
    ("value", "total", "at_least_one", "count"),
    [
        (3, 64, False, 3),
        ("25%", 64, False, 16),
        ("25%", 7, False, 1),
        ("10%", 7, False, 0),
        ("10%", 7, True, 1),
        ("0%", 7, True, 0),
        ("100%", 7, False, 7),
        ("12.5%", 64, False, 8),
        ("10%", 0, True, 0),
    ],
)
def test_share_rounds_percentages_down(
    value: int | str, total: int, at_least_one: bool, count: int
) -> None:
    assert share(value, total, at_least_one) == count


def test_percentages_resolve_against_the_run() -> None:
    plan = RolloutPlan.of(Rollout(canary="5%", parallel="25%", max_failures="10%", pause=2), 64)
    assert plan == RolloutPlan(canary=3, parallel=16, max_failures=6, pause=2)
    assert [len(wave) for wave in waves(list(range(64)), plan)] == [1, 1, 1, 16, 16, 16, 13]
    assert RolloutPlan.of(Rollout(parallel="1%"), 7).parallel == 1  # never a wave of none


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("parallel", "0%", "no container at all"),
        ("parallel", 0, "greater than or equal to 1"),
        ("parallel", "150%", "more than 100%"),
        ("canary", "25 %", "pattern"),
        ("max_failures", "-1", "pattern"),
        ("pause", 0, "greater than 0"),
    ],
)
def test_bad_rollout_values_are_refused(field: str, value: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Rollout.model_validate({field: value})


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
        self.pauses: list[float] = []

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
        return Outcome(name, "pve", result="failed", error=str(exc), exit_code=exc.exit_code)

    def rollout(self, rollout: Rollout, names: list[str] = NAMES) -> RolloutRun:
        return run_rollout(
            names, rollout, self.run_one, self.skipped, self.unreached, sleep=self.pauses.append
        )

    def run(self, rollout: Rollout, names: list[str] = NAMES) -> list[tuple[str, str]]:
        return [(o.name, o.result) for o in self.rollout(rollout, names).outcomes]


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

    assert results[:2] == [("a", "deployed"), ("b", "failed")]
    assert {result for _, result in results[2:]} == {"skipped"}


def test_waves_are_summarised_in_order() -> None:
    deploys = Deploys({"c"})
    run = deploys.rollout(Rollout(canary=1, parallel=3, max_failures=0))
    summary = [(w["wave"], w["kind"], w["targets"], w["results"]) for w in jsonable(run)["waves"]]
    assert summary == [
        (1, "canary", ["a"], {"deployed": 1}),
        (2, "wave", ["b", "c", "d"], {"deployed": 2, "rolled_back": 1}),
        (3, "wave", ["e", "f", "g"], {"skipped": 3}),
    ]
    assert jsonable(run)["parallel"] == 3


def test_pause_between_waves_not_after_the_last_nor_once_the_budget_is_spent() -> None:
    deploys = Deploys()
    run = deploys.rollout(Rollout(canary=1, parallel=3, pause=7.5))
    assert deploys.pauses == [7.5, 7.5]  # after the canary and the first wave of three
    assert [wave.paused for wave in run.waves] == [7.5, 7.5, 0.0]

    failing = Deploys({"a"})
    failing.rollout(Rollout(canary=1, parallel=3, pause=7.5))
    assert failing.pauses == []


def test_a_container_paused_for_a_decision_holds_the_next_wave_not_its_own() -> None:
    """A paused gate (gate.on_inconclusive: pause) is a deploy that has not returned:
    the rest of its wave finishes meanwhile, and no container of the next wave starts
    until it is decided."""
    decided = threading.Event()
    finished: list[str] = []

    def wait(name: str) -> None:
        if name == "b":  # paused until the others of its wave are done
            assert decided.wait(timeout=5)
        if name in ("c", "d"):
            finished.append(name)
            if len(finished) == 2:
                assert "e" not in deploys.started  # the next wave waits for b
                decided.set()

    deploys = Deploys(wait=wait)
    assert deploys.run(Rollout(canary=1, parallel=3)) == [(n, "deployed") for n in NAMES]
    assert deploys.started.index("e") > deploys.started.index("b")
