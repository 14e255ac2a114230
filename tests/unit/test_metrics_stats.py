from __future__ import annotations

import math
import random
import statistics
from statistics import NormalDist

import pytest
from hypothesis import given
from hypothesis import strategies as st
from simulated import CORRECT, accepted_lengths, chunked

from orchestrator.metrics.stats import Batch, batch_means_interval, student_t_quantile


def t_cdf(x: float, dof: int, steps: int = 4000) -> float:
    """Student's t distribution function by Simpson's rule on its density."""
    scale = math.exp(math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)) / math.sqrt(dof * math.pi)

    def density(u: float) -> float:
        return scale * (1 + u * u / dof) ** (-(dof + 1) / 2)

    width = x / steps
    inner = sum((4 if i % 2 else 2) * density(i * width) for i in range(1, steps))
    return 0.5 + width / 3 * (density(0) + inner + density(x))


def t_quantile_by_bisection(p: float, dof: int) -> float:
    low, high = 0.0, 200.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, dof) < p else (low, middle)
    return (low + high) / 2


@pytest.mark.parametrize("p", [0.9, 0.95, 0.975, 0.995])
@pytest.mark.parametrize("dof", [1, 2, 3, 4, 6, 10, 25])
def test_t_quantile_matches_the_integrated_density(p: float, dof: int) -> None:
    tolerance = 1e-4 if dof <= 2 else 0.01
    assert student_t_quantile(p, dof) == pytest.approx(
        t_quantile_by_bisection(p, dof), rel=tolerance
    )


@pytest.mark.parametrize(
    ("dof", "printed"), [(1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042)]
)
def test_t_quantile_matches_printed_tables(dof: int, printed: float) -> None:
    assert student_t_quantile(0.975, dof) == pytest.approx(printed, rel=2e-3)


def test_t_quantile_tends_to_the_normal_and_is_symmetric() -> None:
    assert student_t_quantile(0.975, 10**6) == pytest.approx(NormalDist().inv_cdf(0.975), rel=1e-5)
    assert student_t_quantile(0.05, 7) == pytest.approx(-student_t_quantile(0.95, 7))


@pytest.mark.parametrize(("p", "dof"), [(0.0, 3), (1.0, 3), (0.9, 0)])
def test_t_quantile_refuses_what_has_no_answer(p: float, dof: int) -> None:
    with pytest.raises(ValueError):
        student_t_quantile(p, dof)


batches = st.lists(
    st.builds(
        Batch,
        size=st.integers(0, 500),
        mean=st.floats(1, 16),
        variance=st.floats(0, 20),
    ),
    max_size=30,
).filter(lambda found: any(batch.size for batch in found))


@given(batches, st.floats(0.5, 0.999))
def test_bounds_surround_the_mean(found: list[Batch], confidence: float) -> None:
    interval = batch_means_interval(found, confidence)
    drafts = sum(batch.size for batch in found)
    assert interval.mean == pytest.approx(sum(b.size * b.mean for b in found) / drafts)
    if interval.lower is not None and interval.upper is not None:
        assert interval.lower <= interval.mean <= interval.upper


@given(batches)
def test_twice_the_same_independent_evidence_never_widens_the_bounds(found: list[Batch]) -> None:
    """Batches known independent (`merged=(1,)`): the same evidence twice halves the spread
    of the batch means, shrinks the per-draft variance term and lowers Student's quantile.
    (With merging, doubling also enables wider merges of fewer batches, which may widen.)"""
    once = batch_means_interval(found, 0.95, merged=(1,))
    twice = batch_means_interval(found * 2, 0.95, merged=(1,))
    if once.lower is not None and once.upper is not None:
        assert twice.lower is not None and twice.upper is not None
        assert twice.upper - twice.lower <= once.upper - once.lower + 1e-9


def test_one_batch_has_no_bounds_and_no_drafts_no_mean() -> None:
    one = batch_means_interval([Batch(0, 0.0, 0.0), Batch(300, 4.5, 9.0)], 0.95)
    assert (one.mean, one.lower, one.upper) == (4.5, None, None)
    with pytest.raises(ValueError, match="no drafts"):
        batch_means_interval([Batch(0, 0.0, 0.0)], 0.95)


def test_identical_drafts_give_a_point() -> None:
    interval = batch_means_interval([Batch(100, 1.0, 0.0), Batch(80, 1.0, 0.0)], 0.95)
    assert (interval.lower, interval.upper) == (1.0, 1.0)


def _gate(seed: int) -> list[Batch]:
    """One gate's intervals: 1400 correlated drafts from 4 streams, scraped every 120.

    A request lasts 57 drafts of its stream, 228 of the server's: an interval
    is about half a request.
    """
    lengths = accepted_lengths(CORRECT, random.Random(seed), drafts=1400)
    return [
        Batch(len(chunk), 1 + statistics.fmean(chunk), statistics.pvariance(chunk))
        for chunk in chunked(lengths, 120)
    ]


def _naive_covers(gate: list[Batch], truth: float) -> bool:
    """The interval that treats every draft as independent."""
    drafts = sum(batch.size for batch in gate)
    mean = sum(batch.size * batch.mean for batch in gate) / drafts
    squares = sum(batch.size * (batch.variance + (batch.mean - mean) ** 2) for batch in gate)
    half = NormalDist().inv_cdf(0.975) * math.sqrt(squares / (drafts - 1) / drafts)
    return abs(mean - truth) <= half


def test_bounds_cover_the_true_mean_despite_correlated_drafts() -> None:
    truth = CORRECT.mean_acceptance_length
    gates = [_gate(seed) for seed in range(300)]
    covered = 0
    for gate in gates:
        interval = batch_means_interval(gate, 0.95)
        assert interval.lower is not None and interval.upper is not None
        covered += interval.lower <= truth <= interval.upper
    naive = sum(_naive_covers(gate, truth) for gate in gates)
    assert covered / len(gates) >= 0.93
    assert naive / len(gates) < 0.85  # the correlation is real: independence would mislead
