"""The drafter simulation the metrics tests share (tests/simulated.py) against its own
truth: its drafts follow the exact acceptance, and drafts of one request correlate."""

from __future__ import annotations

import random

import pytest
from simulated import (
    BORDERLINE,
    BROKEN,
    CORRECT,
    LATE_FALLOFF,
    Drafter,
    K,
    accepted_lengths,
    chunked,
)


@pytest.mark.parametrize("drafter", [CORRECT, BROKEN, BORDERLINE, LATE_FALLOFF])
def test_simulated_drafts_follow_the_exact_acceptance(drafter: Drafter) -> None:
    lengths = accepted_lengths(drafter, random.Random(7), drafts=100_000)
    shares = [sum(1 for n in lengths if n > i) / len(lengths) for i in range(K)]
    assert shares == pytest.approx(drafter.position_acceptance, abs=0.02)


def test_drafts_of_one_request_are_correlated() -> None:
    """The point of the simulation: batch means vary more than independent drafts would."""
    lengths = accepted_lengths(CORRECT, random.Random(3), drafts=20_000)
    means = [sum(chunk) / len(chunk) for chunk in chunked(lengths, 200)]
    grand = sum(lengths) / len(lengths)
    per_draft = sum((n - grand) ** 2 for n in lengths) / len(lengths)
    between = sum((m - grand) ** 2 for m in means) / (len(means) - 1)
    assert between > 3 * per_draft / 200
