from __future__ import annotations

import random
import statistics
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from simulated import (
    BROKEN,
    CORRECT,
    Drafter,
    K,
    accepted_lengths,
    counters_of,
    interval_measurements,
)

from orchestrator.metrics.evaluate import CounterReset, Measurement, combine, is_reset, measure
from orchestrator.metrics.scrape import MetricsFormatError, SpecDecodeCounters

WARM_UP = [2, 15, 0, 0, 4]


def window(lengths: list[int]) -> Measurement:
    """The measurement between a scrape after warm-up and one after `lengths` more drafts."""
    return measure(counters_of(WARM_UP), counters_of(WARM_UP + lengths))


@pytest.mark.parametrize("drafter", [CORRECT, BROKEN])
def test_measurement_is_the_distribution_of_the_drafts_in_the_window(drafter: Drafter) -> None:
    lengths = accepted_lengths(drafter, random.Random(11), drafts=2000)
    measured = window(lengths)
    counts = Counter(lengths)
    assert measured.accepted_length_counts == tuple(counts[j] for j in range(K + 1))
    assert measured.drafts == len(lengths)
    assert measured.accepted == sum(lengths)
    assert measured.draft_tokens == K * len(lengths)
    assert measured.mean_acceptance_length == pytest.approx(1 + statistics.fmean(lengths))
    assert measured.accepted_length_variance == pytest.approx(statistics.pvariance(lengths))
    shares = [sum(1 for n in lengths if n > i) / len(lengths) for i in range(K)]
    assert measured.per_position_acceptance == pytest.approx(shares)


@pytest.mark.parametrize("drafter", [CORRECT, BROKEN])
def test_measured_mean_is_close_to_the_drafters_true_mean(drafter: Drafter) -> None:
    measured = window(accepted_lengths(drafter, random.Random(5), drafts=60_000))
    assert measured.mean_acceptance_length == pytest.approx(
        drafter.mean_acceptance_length, rel=0.03
    )
    assert measured.per_position_acceptance is not None
    assert measured.per_position_acceptance[0] == pytest.approx(
        drafter.position_acceptance[0], abs=0.03
    )


def test_zero_drafts_measure_as_zero_with_no_rates() -> None:
    measured = window([])
    assert measured.drafts == 0
    assert measured.accepted_length_counts == (0,) * (K + 1)
    assert measured.mean_acceptance_length is None
    assert measured.accepted_length_variance is None
    assert measured.per_position_acceptance is None


def test_a_counter_that_went_down_is_a_reset() -> None:
    before = counters_of([*WARM_UP, 3, 3, 3])
    after = counters_of([1])  # the server restarted and drafted once
    assert is_reset(before, after)
    with pytest.raises(CounterReset, match="restarted"):
        measure(before, after)


def test_a_new_creation_time_is_a_reset_even_when_counts_grew() -> None:
    before = counters_of(WARM_UP, created=1_764_918_310.7)
    after = counters_of(WARM_UP * 3, created=1_764_918_922.1)
    assert is_reset(before, after)


def test_a_different_number_of_positions_is_a_reset() -> None:
    before = counters_of(WARM_UP)
    after = replace(before, accepted_per_pos=before.accepted_per_pos[:7])
    assert is_reset(before, after)


def test_growing_counters_of_one_server_are_no_reset() -> None:
    before = counters_of(WARM_UP, created=1_764_918_310.7)
    after = counters_of([*WARM_UP, 4, 0], created=1_764_918_310.7)
    assert not is_reset(before, after)
    assert not is_reset(before, before)


def test_deltas_that_contradict_each_other_are_format_errors() -> None:
    """Each scrape alone is consistent, but accepted tokens grew without a draft."""
    before = SpecDecodeCounters(drafts=5, draft_tokens=75, accepted=3, accepted_per_pos=(3, 0))
    after = SpecDecodeCounters(drafts=5, draft_tokens=75, accepted=6, accepted_per_pos=(3, 3))
    with pytest.raises(MetricsFormatError, match="deltas contradict"):
        measure(before, after)


@given(
    st.lists(st.integers(0, K), min_size=1, max_size=60),
    st.lists(st.integers(0, K), max_size=60),
    st.lists(st.integers(0, K), max_size=60),
)
def test_consecutive_windows_combine_into_the_whole(
    first: list[int], second: list[int], third: list[int]
) -> None:
    parts = interval_measurements(first + second + third, per_interval=25)
    whole = window(first + second + third)
    assert combine(parts) == whole


def test_combining_nothing_is_an_empty_measurement() -> None:
    assert combine([]).drafts == 0
