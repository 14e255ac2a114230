"""Numbers a server reports, bounded where they are read.

A count is an integer in 0..MAX_COUNT, a time a finite float; anything else is
the server's fault, named by its figure where it is read, never an overflow in
the arithmetic after it (10**400 drafts, or counters of two engines summed past
what a float holds, once crashed the gate's variance).
"""

from __future__ import annotations

import math
from typing import TypeGuard

MAX_COUNT = 2**53
"""The largest count read: every count up to it is exact as a float, so sums over
engines, windows and requests, their ratios and variances stay finite."""
SHOWN_DIGITS = 20


def is_count(value: object) -> TypeGuard[int]:
    """An integer (not a bool) in 0..MAX_COUNT."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def is_finite(value: object) -> bool:
    """A real number (not a bool) that is neither infinite nor NaN."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def shown(value: object) -> str:
    """The value for a message, a huge integer by its leading digits and length."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**SHOWN_DIGITS:
        digits = str(abs(value))
        return f"{'-' * (value < 0)}{digits[:6]}... ({len(digits)} digits)"
    return repr(value)[:80]
