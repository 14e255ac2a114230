from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from simulated import (
    BORDERLINE,
    BROKEN,
    CORRECT,
    LATE_FALLOFF,
    Drafter,
    K,
    accepted_lengths,
    decaying,
    interval_measurements,
)

from orchestrator.contract import jsonable
from orchestrator.metrics.assess import (
    FailureCauses,
    GateCriteria,
    RequestCriteria,
    Verdict,
    assess,
    explain,
    judge_requests,
    no_spec_decode_verdict,
)
from orchestrator.metrics.evaluate import Measurement

CRITERIA = GateCriteria(
    min_mean_acceptance_length=2.5, min_position1_acceptance=0.5, min_drafts=200
)
CAUSES = FailureCauses(misaligned="the alignment fields", shallow="the attention fields")
SCRAPE_EVERY = 60  # drafts; a quarter of a probe request's duration at 4 streams


def run_gate(
    drafter: Drafter, seed: int, budget: int, criteria: GateCriteria = CRITERIA
) -> Verdict:
    """The gate's loop: assess after every scrape, stop at the first pass or fail."""
    lengths = accepted_lengths(drafter, random.Random(seed), drafts=budget)
    batches = interval_measurements(lengths, SCRAPE_EVERY)
    for seen in range(1, len(batches) + 1):
        verdict = assess(batches[:seen], criteria)
        if verdict.outcome != "inconclusive":
            break
    return verdict


def outcomes(drafter: Drafter, budget: int, criteria: GateCriteria = CRITERIA) -> Counter[str]:
    return Counter(run_gate(drafter, seed, budget, criteria).outcome for seed in range(100))


def same(lengths: dict[int, int], batches: int) -> list[Measurement]:
    """Identical intervals with drafts accepting the given lengths."""
    counts = tuple(lengths.get(j, 0) for j in range(K + 1))
    return [Measurement(counts, K * sum(counts))] * batches


def test_a_correct_drafter_passes_within_a_few_hundred_drafts() -> None:
    verdicts = [run_gate(CORRECT, seed, budget=400) for seed in range(100)]
    passed = [verdict.drafts for verdict in verdicts if verdict.outcome == "pass"]
    assert len(passed) >= 95
    assert sorted(passed)[len(passed) // 2] <= 300
    assert not any(verdict.outcome == "fail" for verdict in verdicts)


def test_a_broken_drafter_fails_as_soon_as_enough_drafts_are_in() -> None:
    for seed in range(100):
        verdict = run_gate(BROKEN, seed, budget=2000)
        assert verdict.outcome == "fail"
        assert verdict.drafts < CRITERIA.min_drafts + SCRAPE_EVERY
        assert verdict.upper is not None and verdict.upper < 2.5
        assert "not aligned with the target: check the alignment fields" in (
            explain(verdict, CAUSES) or ""
        )


def test_a_borderline_drafter_stays_inconclusive_with_few_drafts() -> None:
    assert abs(BORDERLINE.mean_acceptance_length - 2.5) < 0.02
    assert outcomes(BORDERLINE, budget=400)["inconclusive"] >= 85


@pytest.mark.parametrize(("first", "wrong"), [(0.70, "pass"), (0.82, "fail")])
def test_a_long_gate_rarely_decides_against_a_clear_margin(first: float, wrong: str) -> None:
    """Looking after every scrape spends more than one look's error, but not much."""
    drafter = Drafter(((0.5, decaying(first, 0.9)), (0.5, decaying(first - 0.2, 0.9))))
    assert abs(drafter.mean_acceptance_length - 2.5) > 0.2
    criteria = GateCriteria(min_mean_acceptance_length=2.5, min_drafts=200)
    assert outcomes(drafter, budget=3000, criteria=criteria)[wrong] <= 3


def test_acceptance_that_falls_after_position_one_points_at_attention_settings() -> None:
    verdict = run_gate(LATE_FALLOFF, seed=1, budget=2000)
    assert verdict.outcome == "fail"
    assert "check the attention fields" in (explain(verdict, CAUSES) or "")


def test_a_failing_reason_names_the_bound_and_the_requirement() -> None:
    verdict = assess(same({0: 100}, batches=4), CRITERIA)
    assert verdict.outcome == "fail"
    assert (
        verdict.reason
        == "mean acceptance length 1.00 (95% upper bound 1.00) < required 2.50 over 400 drafts"
    )


def test_position_one_below_its_minimum_fails_even_with_long_drafts() -> None:
    criteria = GateCriteria(min_mean_acceptance_length=2.5, min_position1_acceptance=0.7)
    verdict = assess(same({0: 55, 12: 45}, batches=4), criteria)
    assert verdict.outcome == "fail"
    assert verdict.mean_acceptance_length == pytest.approx(1 + 0.45 * 12)
    assert verdict.reason.startswith("position-1 acceptance 0.45 (95% upper bound 0.5")
    assert verdict.reason.endswith(") < required 0.70 over 400 drafts")


def test_a_passing_reason_gives_every_lower_bound() -> None:
    verdict = assess(same({3: 50, 5: 50}, batches=4), CRITERIA)
    assert verdict.outcome == "pass"
    assert verdict.reason.startswith("mean acceptance length 5.00 (95% lower bound 4.")
    assert ">= required 2.50, position-1 acceptance 1.00 (95% lower bound 1.00)" in verdict.reason
    assert verdict.reason.endswith(">= required 0.50 over 400 drafts")
    assert explain(verdict, CAUSES) is None


def test_too_few_drafts_is_inconclusive_however_good() -> None:
    verdict = assess(same({7: 30}, batches=3), CRITERIA)
    assert verdict.outcome == "inconclusive"
    assert (
        verdict.reason
        == "not enough evidence yet: 90 of 200 drafts (mean acceptance length 8.00 so far)"
    )


def test_one_scrape_interval_gives_no_bounds() -> None:
    verdict = assess(same({4: 300}, batches=1), CRITERIA)
    assert (verdict.outcome, verdict.lower, verdict.upper) == ("inconclusive", None, None)
    assert "one scrape interval" in verdict.reason


@pytest.mark.parametrize("batches", [[], same({}, batches=3)])
def test_no_drafts_is_inconclusive_without_numbers(batches: list[Measurement]) -> None:
    verdict = assess(batches, CRITERIA)
    assert verdict == Verdict("inconclusive", None, None, None, (), 0, verdict.reason)
    assert verdict.reason == "not enough evidence yet: no drafts measured"


def test_no_spec_decode_is_a_failure_of_its_own() -> None:
    verdict = no_spec_decode_verdict()
    assert verdict.outcome == "fail"
    assert verdict.reason.startswith("speculative decoding is not active")
    assert explain(verdict, CAUSES) is None


def test_a_verdict_serialises_to_json() -> None:
    verdict = run_gate(CORRECT, seed=2, budget=400)
    document = json.loads(json.dumps(jsonable(verdict)))
    assert document == {
        "verdict": verdict.outcome,
        "mean_acceptance_length": verdict.mean_acceptance_length,
        "lower": verdict.lower,
        "upper": verdict.upper,
        "per_position_acceptance": list(verdict.per_position_acceptance),
        "drafts": verdict.drafts,
        "reason": verdict.reason,
    }
    assert len(document["per_position_acceptance"]) == K


@pytest.mark.parametrize(
    "fields",
    [
        {"min_mean_acceptance_length": 0.5},
        {"min_mean_acceptance_length": 2.5, "min_position1_acceptance": 1.5},
        {"min_mean_acceptance_length": 2.5, "min_drafts": 0},
        {"min_mean_acceptance_length": 2.5, "confidence": 1.0},
    ],
)
def test_criteria_that_cannot_be_met_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        GateCriteria(**fields)  # type: ignore[arg-type]


intervals = st.lists(
    st.lists(st.integers(0, 40), min_size=K + 1, max_size=K + 1).map(
        lambda counts: Measurement(tuple(counts), K * sum(counts))
    ),
    max_size=12,
)


@given(intervals, st.floats(1, 16), st.floats(0, 1))
def test_the_outcome_follows_the_bounds(
    batches: list[Measurement], threshold: float, position1: float
) -> None:
    criteria = GateCriteria(threshold, position1, min_drafts=50)
    verdict = assess(batches, criteria)
    if verdict.lower is not None and verdict.upper is not None:
        assert verdict.mean_acceptance_length is not None
        assert verdict.lower <= verdict.mean_acceptance_length <= verdict.upper
    if verdict.outcome == "pass":
        assert verdict.lower is not None and verdict.lower >= threshold
        assert verdict.per_position_acceptance[0] >= position1
    if verdict.outcome != "inconclusive":
        assert verdict.drafts >= criteria.min_drafts
    if verdict.outcome == "fail" and verdict.upper is not None and verdict.upper >= threshold:
        assert "position-1 acceptance" in verdict.reason


PASSED = Verdict("pass", 4.1, 3.9, 4.3, (0.8,), 900, "mean acceptance length 4.10 >= 2.50")
REQUESTS = RequestCriteria(min_responses=4, max_error_share=0.05)


def test_counters_that_pass_while_every_request_fails_do_not_pass() -> None:
    """The field's case: acceptance read from /metrics, `requests 4, request_errors 4`."""
    verdict = judge_requests(PASSED, 0, 4, "HTTP 500 from /v1/completions", REQUESTS)

    assert verdict.outcome == "fail"
    assert verdict.reason.startswith(
        "4 of 4 probe requests failed (100%, more than the 5% allowed; "
        "first: HTTP 500 from /v1/completions)"
    )


def test_request_errors_within_the_share_leave_the_verdict_alone() -> None:
    assert judge_requests(PASSED, 40, 2, "timeout", REQUESTS) == PASSED


def test_a_share_above_the_limit_fails_only_once_enough_requests_finished() -> None:
    early = judge_requests(PASSED, 1, 1, "timeout", REQUESTS)
    assert early.outcome == "inconclusive" and "1 probe responses of the 4 required" in early.reason
    assert judge_requests(PASSED, 0, 1, "timeout", REQUESTS, final=True).outcome == "fail"
    assert judge_requests(PASSED, 2, 2, "timeout", REQUESTS).outcome == "fail"
    assert judge_requests(PASSED, 6, 2, "timeout", REQUESTS).outcome == "fail"


def test_one_failed_request_alone_does_not_fail_a_phase() -> None:
    """A busy host drops a stream now and then; per-request looks are 8 requests."""
    assert judge_requests(PASSED, 7, 1, "Unable to open channel", REQUESTS) == PASSED
    early = judge_requests(PASSED, 3, 1, "timeout", REQUESTS)
    assert early.outcome == "inconclusive"


def test_too_few_answers_keep_a_pass_undecided_and_leave_a_fail_a_fail() -> None:
    failed = Verdict("fail", 1.1, 1.0, 1.2, (0.05,), 900, "misaligned")
    assert judge_requests(PASSED, 3, 0, "", REQUESTS).outcome == "inconclusive"
    assert judge_requests(PASSED, 4, 0, "", REQUESTS) == PASSED
    assert judge_requests(failed, 0, 0, "", REQUESTS) == failed
