"""Advice on `num_speculative_tokens` from the per-position acceptance: advice only.

Position i adds its acceptance share (the drafts that accepted at least i
tokens) to the mean acceptance length, so positions that accept under a few
percent of drafts cost drafting work and give almost nothing back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated

import pydantic
from pydantic import PlainSerializer

TAIL_SHARE = 0.02


@pydantic.dataclasses.dataclass(frozen=True)
class Advice:
    """How many speculative tokens carry their weight, and what the rest add."""

    num_speculative_tokens: int
    suggested: int
    kept_share: Annotated[float, PlainSerializer(lambda share: round(share, 4))]
    """Of the mean acceptance length (bonus token included) at `suggested` tokens."""
    threshold: float
    text: str


def speculative_tokens_advice(
    per_position: Sequence[float], threshold: float = TAIL_SHARE
) -> Advice | None:
    """The smallest token count whose later positions all accept under `threshold`.

    None without a measured curve.
    """
    k = len(per_position)
    if not k:
        return None
    carried = max((i + 1 for i, share in enumerate(per_position) if share >= threshold), default=0)
    kept = (1 + sum(per_position[:carried])) / (1 + sum(per_position))
    under = f"under {threshold:.0%} of drafts"
    if carried == k:
        text = (
            f"every position up to {k} accepts at least {threshold:.0%} of drafts"
            f" (position {k}: {per_position[-1]:.1%}):"
            f" num_speculative_tokens {k} carries its weight"
        )
    elif carried == 0:
        text = (
            f"position 1 accepts {under}: drafting does not pay at any"
            " num_speculative_tokens; fix the drafter first"
        )
    else:
        tail = f"positions {carried + 1}-{k} accept" if carried + 1 < k else f"position {k} accepts"
        text = (
            f"{tail} {under}: num_speculative_tokens {carried} keeps"
            f" {math.floor(kept * 100)}% of the mean acceptance length"
        )
    return Advice(k, carried, kept, threshold, text)
