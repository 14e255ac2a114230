"""The speed verdict: a release's measured speed against its reference, level by level.

The reference is the same target served without speculation (a baseline), or, without
one, the release being replaced, from their recorded figures at the same levels. The
figure judged is the server's total output tokens per second at each level: what the
server delivers to that many streams. The speedup's bound combines both intervals
conservatively: lower = release lower / reference upper, upper = release upper /
reference lower. A level fails when the upper bound is below what is required: the
release is provably slower than allowed. Otherwise it passes, its bound shown: a
speedup that cannot be told from the requirement is no reason to take a release away
(acceptance is judged apart). It is inconclusive, never a pass, when it was not
measured or other clients' requests were too large a share of the batch it measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pydantic

from orchestrator.metrics.assess import VerdictOutcome
from orchestrator.metrics.speed import Figure

ReferenceKind = Literal["baseline", "replaced_release"]
SpeedOutcome = Literal["pass", "fail", "inconclusive", "not_judged"]
NO_REFERENCE = "no reference: speed recorded, not judged"
REFERENCE_WORDS = {"baseline": "baseline", "replaced_release": "the replaced release"}


@pydantic.dataclasses.dataclass(frozen=True)
class ReferenceLevel:
    """The reference's total output tokens per second at one level."""

    concurrency: int
    total: Figure


@pydantic.dataclasses.dataclass(frozen=True)
class SpeedReference:
    """What a release's speed is judged against, and where its figures came from (a
    baseline's record, or the replaced release's manifest)."""

    kind: ReferenceKind
    source: str
    levels: tuple[ReferenceLevel, ...]

    def at(self, concurrency: int) -> Figure | None:
        return next((lv.total for lv in self.levels if lv.concurrency == concurrency), None)


@dataclass(frozen=True)
class SpeedCriteria:
    """From the playbook's `gate.speed`."""

    min_speedup: float
    max_regression: float
    max_foreign_share: float

    def required(self, kind: ReferenceKind) -> tuple[float, str]:
        """The speedup a level needs against this kind of reference, in the field's words."""
        if kind == "baseline":
            return self.min_speedup, f"min_speedup {self.min_speedup:g}"
        floor = 1 - self.max_regression
        return floor, f"1 - max_regression {self.max_regression:g} = {floor:g}"


@dataclass(frozen=True)
class MeasuredSpeed:
    """What judging needs of one measured level."""

    concurrency: int
    total: Figure | None
    """None: nothing measured (every request failed, or none decoded)."""
    foreign_share: float | None
    """None: the batch was not read."""


@dataclass(frozen=True)
class LevelJudgement:
    outcome: SpeedOutcome
    speedup: Figure | None
    reason: str


def speedup(release: Figure, reference: Figure) -> Figure:
    """Release over reference, with the conservative bound from both intervals (None
    bounds when either lacks them or the reference's lower bound is not above zero)."""
    mean = release.mean / reference.mean
    low, high = release.lower, release.upper
    reference_low, reference_high = reference.lower, reference.upper
    if low is None or high is None or reference_low is None or reference_high is None:
        return Figure(mean)
    if reference_low <= 0:
        return Figure(mean)
    return Figure(mean, max(0.0, low) / reference_high, high / reference_low)


def judge_level(
    level: MeasuredSpeed, reference: SpeedReference | None, criteria: SpeedCriteria
) -> LevelJudgement:
    """One level's speed verdict (see the module)."""
    streams = f"{level.concurrency} stream{'s' if level.concurrency != 1 else ''}"
    if level.total is None:
        outcome: SpeedOutcome = "not_judged" if reference is None else "inconclusive"
        return LevelJudgement(outcome, None, f"speed not measured at {streams}")
    if reference is None:
        return LevelJudgement("not_judged", None, NO_REFERENCE)
    against = reference.at(level.concurrency)
    words = f"{REFERENCE_WORDS[reference.kind]} {reference.source}"
    if against is None or against.mean <= 0:
        return LevelJudgement(
            "inconclusive", None, f"{words} has no figure at {streams}: not judged"
        )
    ratio = speedup(level.total, against)
    required, named = criteria.required(reference.kind)
    shown = f"speedup {ratio.mean:.2f}x"
    if ratio.lower is not None and ratio.upper is not None:
        shown += f" ({ratio.lower:.2f}-{ratio.upper:.2f})"
    shown += f" at {streams}"
    share = level.foreign_share
    if share is None or share > criteria.max_foreign_share:
        seen = "not read" if share is None else f"{share:.0%} other clients' requests"
        return LevelJudgement(
            "inconclusive",
            ratio,
            f"{shown}: the batch measured was {seen} (max_foreign_share "
            f"{criteria.max_foreign_share:.0%}), inconclusive against {words}",
        )
    if ratio.upper is not None and ratio.upper < required:
        return LevelJudgement("fail", ratio, f"{shown} < {named} against {words}")
    if ratio.lower is not None and ratio.lower >= required:
        return LevelJudgement("pass", ratio, f"{shown} >= {named} against {words}")
    return LevelJudgement("pass", ratio, f"{shown}: not provably below {named} against {words}")


def speed_outcome(judgements: Sequence[LevelJudgement]) -> tuple[SpeedOutcome, str]:
    """Fail on any failed level, pass when every level passed, not judged without a
    reference, else inconclusive; with the deciding level's reason."""
    for outcome in ("fail", "inconclusive"):
        deciding = next((j for j in judgements if j.outcome == outcome), None)
        if deciding is not None:
            return deciding.outcome, deciding.reason
    if judgements and all(j.outcome == "pass" for j in judgements):
        return "pass", "; ".join(j.reason for j in judgements)
    return "not_judged", NO_REFERENCE


def combined_outcome(acceptance: VerdictOutcome, speed: SpeedOutcome) -> VerdictOutcome:
    """The gate's verdict over both: a failure of either fails it; speed not judged
    leaves acceptance's verdict; else a pass needs both."""
    if "fail" in (acceptance, speed):
        return "fail"
    if speed == "not_judged":
        return acceptance
    return "pass" if (acceptance, speed) == ("pass", "pass") else "inconclusive"
