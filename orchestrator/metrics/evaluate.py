"""What the drafter did between two scrapes: counter deltas as a distribution.

The per-position counters count the drafts that accepted at least i+1 tokens,
so their deltas give how many drafts accepted exactly 0, 1, 2, ... tokens:
the whole distribution, hence a mean and a variance, not just a ratio.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate, pairwise, zip_longest

from orchestrator.metrics.scrape import MetricsFormatError, SpecDecodeCounters, contradictions


class CounterReset(ValueError):
    """A counter went down between two scrapes: the server restarted; start the window again."""


@dataclass(frozen=True)
class Measurement:
    """Drafts in one window, by how many tokens each accepted.

    accepted_length_counts[j] is the number of drafts that accepted exactly j
    tokens, for j = 0..k. Rates are None when the window holds no drafts. Sums are
    kept once computed: the gate reads them at every look.
    """

    accepted_length_counts: tuple[int, ...]
    draft_tokens: int

    @cached_property
    def drafts(self) -> int:
        return sum(self.accepted_length_counts)

    @cached_property
    def accepted(self) -> int:
        return sum(length * count for length, count in enumerate(self.accepted_length_counts))

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens gained per draft, the target's bonus token included (vLLM's convention)."""
        return 1 + self.accepted / self.drafts if self.drafts else None

    @cached_property
    def accepted_length_variance(self) -> float | None:
        """Variance of the accepted tokens per draft across the window's drafts."""
        if not self.drafts:
            return None
        mean = self.accepted / self.drafts
        squares = sum(
            count * (length - mean) ** 2 for length, count in enumerate(self.accepted_length_counts)
        )
        return squares / self.drafts

    @property
    def per_position_acceptance(self) -> tuple[float, ...] | None:
        """Share of drafts that accepted at least i+1 tokens, for i = 0..k-1."""
        if not self.drafts:
            return None
        at_least = _at_least(self.accepted_length_counts)
        return tuple(count / self.drafts for count in at_least[1:])


def is_reset(before: SpecDecodeCounters, after: SpecDecodeCounters) -> bool:
    """True when the server restarted between the scrapes.

    Seen as a counter that went down, a different number of draft positions, or
    a new creation time of the counters.
    """
    if len(before.accepted_per_pos) != len(after.accepted_per_pos):
        return True
    if None not in (before.created, after.created) and before.created != after.created:
        return True
    pairs = zip(_values(before), _values(after), strict=True)
    return any(later < earlier for earlier, later in pairs)


def measure(before: SpecDecodeCounters, after: SpecDecodeCounters) -> Measurement:
    """The drafts counted between two scrapes of one server.

    Raises CounterReset when the server restarted in between, and
    MetricsFormatError when the deltas contradict each other (a torn scrape).
    """
    if is_reset(before, after):
        raise CounterReset(
            f"counters went from {before.drafts} to {after.drafts} drafts: the server restarted"
        )
    delta = SpecDecodeCounters(
        drafts=after.drafts - before.drafts,
        draft_tokens=after.draft_tokens - before.draft_tokens,
        accepted=after.accepted - before.accepted,
        accepted_per_pos=tuple(
            a - b for b, a in zip(before.accepted_per_pos, after.accepted_per_pos, strict=True)
        ),
    )
    problems = contradictions(delta)
    if problems:
        raise MetricsFormatError("counter deltas contradict each other: " + "; ".join(problems))
    at_least = (delta.drafts, *delta.accepted_per_pos, 0)
    return Measurement(
        accepted_length_counts=tuple(more - fewer for more, fewer in pairwise(at_least)),
        draft_tokens=delta.draft_tokens,
    )


def combine(measurements: Iterable[Measurement]) -> Measurement:
    """One measurement over consecutive windows."""
    measurements = list(measurements)
    counts = zip_longest(*(m.accepted_length_counts for m in measurements), fillvalue=0)
    return Measurement(
        accepted_length_counts=tuple(sum(column) for column in counts),
        draft_tokens=sum(m.draft_tokens for m in measurements),
    )


def _values(counters: SpecDecodeCounters) -> tuple[int, ...]:
    return (counters.drafts, counters.draft_tokens, counters.accepted, *counters.accepted_per_pos)


def _at_least(counts: tuple[int, ...]) -> tuple[int, ...]:
    """Drafts that accepted at least j tokens, for j = 0..k."""
    return tuple(accumulate(reversed(counts)))[::-1]
