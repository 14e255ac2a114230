"""`orch tune`'s judgement, apart from the deploys that measure: the drafting depths
asked for, each depth's gated figures per speed level, the best depth per level and
the line that applies it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import pydantic

from orchestrator.errors import InputError
from orchestrator.metrics.speed import Figure

TUNED_FIELD = "server.num_speculative_tokens"
"""The playbook field `orch tune` varies."""
VALUES_OPTION = "--num-speculative-tokens"
MAX_VALUES = 32
"""A tune deploys once per value: more than this is a typo, not a plan."""
LOWEST, HIGHEST = 1, 256
"""The field's own bounds (`playbook.py`, Server.num_speculative_tokens)."""

_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*$")


def parse_values(text: str) -> list[int]:
    """`A..B` (both included, A <= B) or `A,B,...` (distinct, in the order given)."""
    where = f"{VALUES_OPTION} {text!r}"
    matched = _RANGE.match(text)
    if matched:
        low, high = int(matched[1]), int(matched[2])
        if low > high:
            raise InputError(f"{where}: a range runs upward, e.g. {high}..{low}")
        values = list(range(low, high + 1))
    else:
        items = [item.strip() for item in text.split(",")]
        if not all(item.isdigit() for item in items):
            raise InputError(f"{where}: give a range A..B or a list A,B,... of whole numbers")
        values = [int(item) for item in items]
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise InputError(f"{where}: {', '.join(map(str, repeated))} given twice")
    outside = [v for v in values if not LOWEST <= v <= HIGHEST]
    if outside:
        raise InputError(f"{where}: {outside[0]} is outside {LOWEST}..{HIGHEST}")
    if len(values) > MAX_VALUES:
        raise InputError(f"{where}: {len(values)} values, at most {MAX_VALUES} (one deploy each)")
    return values


@pydantic.dataclasses.dataclass(frozen=True)
class TunedLevel:
    """One speed level of one depth's gate."""

    concurrency: int
    total_tokens_per_second: Figure | None
    speedup: Figure | None
    """Over the gate's reference (None: the gate had none)."""


@pydantic.dataclasses.dataclass(frozen=True)
class TuneStep:
    """One depth: its deploy and what its gate measured."""

    value: int
    run_id: str
    result: str
    """The deploy's result on the container (`deployed`, `rolled_back`, ...)."""
    release: str | None
    """The release the depth rendered."""
    verdict: str | None
    """The gate's verdict (None: no gate ran)."""
    mean_acceptance_length: float | None
    levels: list[TunedLevel]

    @property
    def passed(self) -> bool:
        """The depth's release passed its gate and was left serving."""
        return self.verdict == "pass" and self.result in ("deployed", "unchanged", "regated")


Measure = Literal["speedup", "total_tokens_per_second"]


@pydantic.dataclasses.dataclass(frozen=True)
class Best:
    """The best passing depth at one level, and by which figure it was chosen."""

    concurrency: int
    value: int
    by: Measure
    figure: Figure


def best_per_level(steps: Sequence[TuneStep]) -> list[Best]:
    """Per level, the passing depth with the highest speedup when every passing depth
    has one there (they share the gate's reference), else the highest total tokens/s;
    a tie goes to the smaller depth (less drafting work)."""
    passing = [s for s in steps if s.passed]
    levels = sorted({lv.concurrency for s in passing for lv in s.levels})
    chosen: list[Best] = []
    for concurrency in levels:
        at = [(s.value, lv) for s in passing for lv in s.levels if lv.concurrency == concurrency]
        by: Measure = "speedup" if all(lv.speedup for _, lv in at) else "total_tokens_per_second"
        figures = [(value, getattr(lv, by)) for value, lv in at if getattr(lv, by)]
        if not figures:
            continue
        value, figure = max(figures, key=lambda pair: (pair[1].mean, -pair[0]))
        chosen.append(Best(concurrency, value, by, figure))
    return chosen


def chosen_value(best: Sequence[Best], steps: Sequence[TuneStep]) -> int | None:
    """The depth to end on: the best at the highest level (the production traffic the
    playbook states), else the first passing depth; None when none passed."""
    if best:
        return max(best, key=lambda b: b.concurrency).value
    return next((s.value for s in steps if s.passed), None)


def set_line(value: int) -> str:
    return f"--set {TUNED_FIELD}={value}"


def playbook_line(value: int) -> str:
    """The playbook's own line (under `server:`)."""
    return f"num_speculative_tokens: {value}"
