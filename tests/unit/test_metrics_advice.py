from __future__ import annotations

import pytest

from orchestrator.contract import jsonable
from orchestrator.metrics.advice import speculative_tokens_advice

# Per-position acceptance of the published drafter in the lab (shares of drafts).
PUBLISHED = [
    0.80, 0.64, 0.49, 0.38, 0.28, 0.20, 0.14, 0.095, 0.061, 0.038, 0.019, 0.015, 0.009, 0.005, 0.002
]  # fmt: skip


def test_tail_under_two_percent_is_advised_away_with_the_length_it_keeps() -> None:
    advice = speculative_tokens_advice(PUBLISHED)
    assert advice is not None
    assert (advice.num_speculative_tokens, advice.suggested) == (15, 10)
    whole = 1 + sum(PUBLISHED)
    assert advice.kept_share == pytest.approx((whole - sum(PUBLISHED[10:])) / whole)
    assert advice.text == (
        "positions 11-15 accept under 2% of drafts:"
        " num_speculative_tokens 10 keeps 98% of the mean acceptance length"
    )


def test_a_single_weak_last_position_is_named_alone() -> None:
    advice = speculative_tokens_advice([0.8, 0.5, 0.01])
    assert advice is not None and advice.suggested == 2
    assert advice.text.startswith("position 3 accepts under 2% of drafts:")


def test_every_position_carrying_weight_keeps_the_count() -> None:
    advice = speculative_tokens_advice([0.8, 0.6, 0.3])
    assert advice is not None
    assert (advice.suggested, advice.kept_share) == (3, 1.0)
    assert "num_speculative_tokens 3 carries its weight" in advice.text


def test_a_weak_position_before_a_strong_one_is_kept() -> None:
    """Shares never rise in vLLM's counters, but the advice must not cut a carrying position."""
    advice = speculative_tokens_advice([0.8, 0.01, 0.05, 0.0])
    assert advice is not None and advice.suggested == 3


def test_nothing_accepted_says_tuning_does_not_help() -> None:
    advice = speculative_tokens_advice([0.01, 0.0])
    assert advice is not None and advice.suggested == 0
    assert "fix the drafter first" in advice.text


def test_no_curve_no_advice() -> None:
    assert speculative_tokens_advice([]) is None


def test_threshold_is_a_parameter_and_in_the_json() -> None:
    advice = speculative_tokens_advice(PUBLISHED, threshold=0.1)
    assert advice is not None and advice.suggested == 7
    assert jsonable(advice)["threshold"] == 0.1
    assert jsonable(advice)["kept_share"] == round(advice.kept_share, 4)
