"""Confidence intervals for a per-draft mean observed in batches of correlated drafts.

Drafts of one request share a prompt and a context, so they are not independent:
an interval that treats every draft as an independent sample is too narrow.
Each scrape interval is one batch; the batch means carry the correlation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

MERGED_INTERVALS = (1, 2, 3)


@dataclass(frozen=True)
class Batch:
    """One scrape interval's view of a per-draft quantity."""

    size: int
    mean: float
    variance: float  # of the quantity across this batch's drafts (divided by size)


@dataclass(frozen=True)
class Interval:
    """A mean with its two-sided confidence bounds; no bounds from a single batch."""

    mean: float
    lower: float | None
    upper: float | None


def student_t_quantile(p: float, dof: int) -> float:
    """The p-quantile of Student's t with `dof` degrees of freedom.

    Exact for 1 and 2 degrees of freedom; the Cornish-Fisher expansion of
    Abramowitz & Stegun 26.7.5 above, within 1% for p <= 0.995.
    """
    if not 0 < p < 1:
        raise ValueError(f"quantile probability must be in (0, 1), got {p}")
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    if dof == 1:
        return math.tan(math.pi * (p - 0.5))
    if dof == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / dof + g2 / dof**2 + g3 / dof**3 + g4 / dof**4


def batch_means_interval(
    batches: Sequence[Batch], confidence: float, merged: Sequence[int] = MERGED_INTERVALS
) -> Interval:
    """Mean over all drafts with a conservative two-sided `confidence` interval.

    Batch means weighted by batch size (the ratio estimator's cluster-robust
    variance, B/(B-1) * sum((n_b/N)^2 * (mean_b - mean)^2)) hold however drafts
    inside a batch are correlated, provided batches are nearly independent of
    each other. A request that straddles a scrape breaks that, so the bound is
    the widest of those computed with batches of 1, 2 and 3 consecutive
    intervals (each with at least 3 batches), and never narrower than if every
    draft were independent (s^2/N). Quantiles are Student's t with B-1 degrees
    of freedom for B batches, so few batches give wide bounds. Scrape no more
    often than every half probe request: shorter intervals let neighbouring
    batches share requests and make the bound too narrow. Empty batches are
    ignored; one batch gives no bounds. Batches known to be independent (one per
    request, see `metrics/requests.py`) need no merging: `merged=(1,)`.
    """
    used = [batch for batch in batches if batch.size > 0]
    if not used:
        raise ValueError("no drafts: a mean needs at least one")
    mean = _pooled(used).mean
    if len(used) < 2:
        return Interval(mean, None, None)
    half_width = max(
        _half_width([_pooled(used[i : i + size]) for i in range(0, len(used), size)], confidence)
        for size in merged
        if size == 1 or len(used) >= 2 * size + 1
    )
    return Interval(mean, mean - half_width, mean + half_width)


def _pooled(batches: Sequence[Batch]) -> Batch:
    """Consecutive batches as one."""
    size = sum(batch.size for batch in batches)
    mean = sum(batch.size * batch.mean for batch in batches) / size
    squares = sum(batch.size * (batch.variance + (batch.mean - mean) ** 2) for batch in batches)
    return Batch(size, mean, squares / size)


def _half_width(batches: Sequence[Batch], confidence: float) -> float:
    whole = _pooled(batches)
    count = len(batches)
    spread = sum(
        (batch.size / whole.size) ** 2 * (batch.mean - whole.mean) ** 2 for batch in batches
    )
    between = count / (count - 1) * spread
    independent = whole.variance / (whole.size - 1)
    quantile = student_t_quantile((1 + confidence) / 2, count - 1)
    return quantile * math.sqrt(max(between, independent))
