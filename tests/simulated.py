"""A seeded drafter simulation counted the way vLLM counts; shared by the metrics tests.

Drafts of one request share its kind (code, chat, ...), so they are correlated,
as in the field; the exact per-position acceptance of a drafter is known in
closed form, so tests compare what the metrics code computes with the truth.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import accumulate, pairwise
from math import prod

from orchestrator.metrics.evaluate import Measurement, measure
from orchestrator.metrics.scrape import SpecDecodeCounters

K = 15  # num_speculative_tokens of a DFlash drafter with block size 16


def decaying(first: float, decay: float, positions: int = K) -> tuple[float, ...]:
    """Conditional acceptance per position, falling geometrically."""
    return tuple(first * decay**i for i in range(positions))


@dataclass(frozen=True)
class Drafter:
    """Request kinds as (weight, conditional acceptance of position i given 0..i-1)."""

    kinds: tuple[tuple[float, tuple[float, ...]], ...]

    @property
    def position_acceptance(self) -> tuple[float, ...]:
        """Exact share of drafts that accept at least i+1 tokens."""
        return tuple(
            sum(weight * prod(accept[: i + 1]) for weight, accept in self.kinds) for i in range(K)
        )

    @property
    def mean_acceptance_length(self) -> float:
        return 1 + sum(self.position_acceptance)


CORRECT = Drafter(((0.5, decaying(0.9, 0.98)), (0.5, decaying(0.7, 0.98))))
BROKEN = Drafter(((0.5, (0.12, 0.4) + (0.0,) * 13), (0.5, (0.04, 0.3) + (0.0,) * 13)))
BORDERLINE = Drafter(((0.5, decaying(0.76, 0.9)), (0.5, decaying(0.56, 0.9))))
LATE_FALLOFF = Drafter(
    ((0.5, (0.85, *decaying(0.35, 0.9, K - 1))), (0.5, (0.75, *decaying(0.25, 0.9, K - 1))))
)


def accepted_lengths(
    drafter: Drafter,
    rng: random.Random,
    drafts: int,
    drafts_per_request: int = 57,
    streams: int = 4,
) -> list[int]:
    """Accepted tokens per draft, in the order the server counts them.

    `streams` requests decode side by side, each stream starting its next
    request when one ends, their starts staggered; drafts interleave. 57 drafts
    is a 256-token answer at 4.5 tokens per draft.
    """
    kinds = [accept for _, accept in drafter.kinds]
    weights = [weight for weight, _ in drafter.kinds]
    left = [(stream + 1) * drafts_per_request // streams for stream in range(streams)]
    current = rng.choices(kinds, weights, k=streams)
    lengths: list[int] = []
    while len(lengths) < drafts:
        stream = len(lengths) % streams
        if not left[stream]:
            current[stream] = rng.choices(kinds, weights)[0]
            left[stream] = drafts_per_request
        left[stream] -= 1
        lengths.append(_one_draft(current[stream], rng))
    return lengths


def _one_draft(accept: tuple[float, ...], rng: random.Random) -> int:
    length = 0
    while length < len(accept) and rng.random() < accept[length]:
        length += 1
    return length


def chunked(lengths: list[int], size: int) -> list[list[int]]:
    return [lengths[start : start + size] for start in range(0, len(lengths), size)]


def counters_of(lengths: list[int], created: float | None = None) -> SpecDecodeCounters:
    """Cumulative counters after these drafts, as vLLM increments them."""
    return SpecDecodeCounters(
        drafts=len(lengths),
        draft_tokens=K * len(lengths),
        accepted=sum(lengths),
        accepted_per_pos=tuple(sum(1 for n in lengths if n > i) for i in range(K)),
        created=created,
    )


def snapshots(lengths: list[int], per_interval: int) -> list[SpecDecodeCounters]:
    """What a scraper sees every `per_interval` drafts, after some warm-up drafts: each
    snapshot the last plus the interval's own counters (linear in the drafts)."""
    warm_up = [3, 0, 7]
    steps = [counters_of(chunk) for chunk in [warm_up, *chunked(lengths, per_interval)]]
    return list(accumulate(steps, _plus))


def _plus(before: SpecDecodeCounters, step: SpecDecodeCounters) -> SpecDecodeCounters:
    return SpecDecodeCounters(
        drafts=before.drafts + step.drafts,
        draft_tokens=before.draft_tokens + step.draft_tokens,
        accepted=before.accepted + step.accepted,
        accepted_per_pos=tuple(
            a + b for a, b in zip(before.accepted_per_pos, step.accepted_per_pos, strict=True)
        ),
    )


def interval_measurements(lengths: list[int], per_interval: int) -> list[Measurement]:
    """The gate's batches: one measurement per scrape interval."""
    seen = snapshots(lengths, per_interval)
    return [measure(before, after) for before, after in pairwise(seen)]
