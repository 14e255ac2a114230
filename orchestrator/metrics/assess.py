"""The acceptance gate's verdict: pass, fail or inconclusive, with a bound and a reason.

The gate calls `assess` after every scrape with all intervals so far and stops
at the first pass or fail; inconclusive means "keep probing", and is the
verdict when the traffic budget or time runs out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Literal

import pydantic
from pydantic import ConfigDict, Field

from orchestrator.metrics.evaluate import Measurement, combine
from orchestrator.metrics.stats import MERGED_INTERVALS, Batch, Interval, batch_means_interval

VerdictOutcome = Literal["pass", "fail", "inconclusive"]

# Position-1 acceptance below this means the drafter reads the wrong hidden
# states or masks with the wrong token; published drafters reach 0.6 to 0.9.
MISALIGNED_POSITION1 = 0.2
HEALTHY_POSITION1 = 0.5
CURVE_SHOWN = 6


@dataclass(frozen=True)
class GateCriteria:
    """What a drafter must show before it is kept."""

    min_mean_acceptance_length: float
    min_position1_acceptance: float | None = None
    min_drafts: int = 200
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if self.min_mean_acceptance_length < 1:
            raise ValueError("min_mean_acceptance_length counts the bonus token: it must be >= 1")
        if (
            self.min_position1_acceptance is not None
            and not 0 <= self.min_position1_acceptance <= 1
        ):
            raise ValueError("min_position1_acceptance is a share of drafts: it must be in [0, 1]")
        if self.min_drafts < 1:
            raise ValueError("min_drafts must be >= 1")
        if not 0 < self.confidence < 1:
            raise ValueError("confidence must be in (0, 1)")


@pydantic.dataclasses.dataclass(frozen=True, config=ConfigDict(serialize_by_alias=True))
class Verdict:
    """The gate's outcome; lower and upper bound the mean acceptance length."""

    outcome: Annotated[VerdictOutcome, Field(serialization_alias="verdict")]
    mean_acceptance_length: float | None
    lower: float | None
    upper: float | None
    per_position_acceptance: tuple[float, ...]
    drafts: int
    reason: str


@dataclass(frozen=True)
class _Check:
    """One criterion against its interval."""

    label: str
    interval: Interval
    required: float

    @property
    def cleared(self) -> bool:
        return self.interval.lower is not None and self.interval.lower >= self.required

    @property
    def missed(self) -> bool:
        return self.interval.upper is not None and self.interval.upper < self.required

    def describe(self, level: str) -> str:
        """The value, the bound that decides, and the minimum, in the field's words."""
        value = f"{self.label} {self.interval.mean:.2f}"
        lower, upper = self.interval.lower, self.interval.upper
        if lower is None or upper is None:
            return (
                f"{value} (one scrape interval: no bounds yet) against required {self.required:.2f}"
            )
        if self.missed:
            return f"{value} ({level} upper bound {upper:.2f}) < required {self.required:.2f}"
        if self.cleared:
            return f"{value} ({level} lower bound {lower:.2f}) >= required {self.required:.2f}"
        bounds = f"{level} bounds {lower:.2f}..{upper:.2f}"
        return f"{value} ({bounds}) against required {self.required:.2f}"


def assess(
    batches: Sequence[Measurement],
    criteria: GateCriteria,
    confidence: float | None = None,
    merged: Sequence[int] = MERGED_INTERVALS,
) -> Verdict:
    """Judge consecutive per-scrape-interval measurements against the criteria.

    Each interval is one batch, so the bounds are batch-means bounds (see
    `batch_means_interval`): conservative under the correlation of drafts inside
    a request, and wide while there are few intervals. Pass when every lower
    bound clears its minimum, fail when an upper bound is below its minimum,
    both only once `min_drafts` drafts were seen. The bounds are two-sided at
    `criteria.confidence` for each look; a gate that looks after every scrape
    errs somewhat more often than one look would, which min_drafts and the
    conservative variance keep small. A caller that spends its error over several
    looks (`metrics/requests.py`) gives each look's own `confidence`, and `merged=(1,)`
    when its batches are independent requests.
    """
    confidence = confidence or criteria.confidence
    total = combine(batches)
    if total.mean_acceptance_length is None:
        return _verdict("inconclusive", total, None, "not enough evidence yet: no drafts measured")
    checks = _checks(batches, criteria, confidence, merged)
    length = checks[0].interval
    level = f"{confidence * 100:g}%"
    over = f"over {total.drafts} drafts"
    if total.drafts < criteria.min_drafts:
        reason = (
            f"not enough evidence yet: {total.drafts} of {criteria.min_drafts} drafts"
            f" (mean acceptance length {length.mean:.2f} so far)"
        )
        return _verdict("inconclusive", total, length, reason)
    missed = next((check for check in checks if check.missed), None)
    if missed:
        return _verdict("fail", total, length, f"{missed.describe(level)} {over}")
    if all(check.cleared for check in checks):
        cleared = ", ".join(check.describe(level) for check in checks)
        return _verdict("pass", total, length, f"{cleared} {over}")
    open_check = next(check for check in checks if not check.cleared)
    reason = f"not enough evidence yet: {open_check.describe(level)} {over}"
    return _verdict("inconclusive", total, length, reason)


@dataclass(frozen=True)
class RequestCriteria:
    """What the probe traffic itself must show: a server that answers no request has
    not passed, whatever its counters say."""

    min_responses: int = 4
    max_error_share: float = 0.05


def judge_requests(
    verdict: Verdict,
    answered: int,
    failed: int,
    first_error: str,
    criteria: RequestCriteria,
    final: bool = False,
) -> Verdict:
    """The verdict with the probe requests' outcome applied: failed requests above the
    allowed share fail the phase (once `min_responses` requests finished, or at the
    phase's end with `final`); too few answered keeps a pass undecided. One failed
    request alone is not a share: a phase of 8 per-request looks would fail on any
    stream a busy host drops, so it takes two, or no answer at all."""
    finished = answered + failed
    share = failed / finished if finished else 0.0
    if (
        (failed >= 2 or (failed and not answered))
        and share > criteria.max_error_share
        and (final or finished >= criteria.min_responses)
    ):
        return replace(
            verdict,
            outcome="fail",
            reason=(
                f"{failed} of {finished} probe requests failed ({share:.0%}, more than the "
                f"{criteria.max_error_share:.0%} allowed; first: {first_error}); "
                f"acceptance: {verdict.reason}"
            ),
        )
    if verdict.outcome == "pass" and answered < criteria.min_responses:
        return replace(
            verdict,
            outcome="inconclusive",
            reason=(
                f"not enough evidence yet: {answered} probe responses of the "
                f"{criteria.min_responses} required ({failed} failed); acceptance: "
                f"{verdict.reason}"
            ),
        )
    return verdict


def no_spec_decode_verdict() -> Verdict:
    """The failure when the server exposes no speculative-decoding series at all."""
    return Verdict(
        outcome="fail",
        mean_acceptance_length=None,
        lower=None,
        upper=None,
        per_position_acceptance=(),
        drafts=0,
        reason=(
            "speculative decoding is not active: /metrics has no vllm:spec_decode_* series"
            " (check --speculative-config in the launch script and the server log)"
        ),
    )


@dataclass(frozen=True)
class FailureCauses:
    """Where a drafter kind's fields explain a failed gate (see `explain`)."""

    misaligned: str
    """The fields to check when position 1 is near zero."""
    shallow: str
    """The fields to check when position 1 is healthy but drafts rarely get further."""


def explain(verdict: Verdict, causes: FailureCauses) -> str | None:
    """A likely cause of a failed gate, read from the per-position acceptance."""
    if verdict.outcome != "fail" or not verdict.per_position_acceptance:
        return None
    position1 = verdict.per_position_acceptance[0]
    if position1 < MISALIGNED_POSITION1:
        return (
            f"position-1 acceptance {position1:.2f} is near zero: the drafter is not aligned"
            f" with the target: check {causes.misaligned}"
        )
    if position1 >= HEALTHY_POSITION1:
        return (
            f"position-1 acceptance {position1:.2f} is healthy but drafts rarely get further"
            f" (mean acceptance length {verdict.mean_acceptance_length:.2f}):"
            f" check {causes.shallow}"
        )
    return None


def explain_context(short: Verdict, long: Verdict, window: int | None) -> str | None:
    """The cause when short contexts pass and long ones fail: the drafter's attention span.

    A short phase stopped undecided by the long one's failure (phases run at once)
    counts when its mean is above the long phase's upper bound."""
    if long.outcome != "fail" or long.mean_acceptance_length is None:
        return None
    if short.mean_acceptance_length is None or short.outcome == "fail":
        return None
    ceiling = long.upper if long.upper is not None else long.mean_acceptance_length
    if short.outcome != "pass" and short.mean_acceptance_length <= ceiling:
        return None
    held = "pass" if short.outcome == "pass" else "hold up, undecided when stopped"
    curve = ", ".join(f"{share:.2f}" for share in long.per_position_acceptance[:CURVE_SHOWN])
    figures = (
        f"short contexts {held} (mean acceptance length {short.mean_acceptance_length:.2f}) and"
        f" long ones collapse (mean acceptance length {long.mean_acceptance_length:.2f},"
        f" per-position {curve}, ...)"
    )
    if window is None:
        return (
            f"{figures}: the drafter config has no sliding window; check layer_types and"
            " sliding_window against the published drafter"
        )
    return (
        f"{figures} past the drafter's {window}-token sliding window: its sliding layers do"
        " not get their window. Either the server runs them as full attention (vLLM builds"
        " without DFlash sliding-window support) or the window the server sees is wrong"
        " (check sliding_window and dflash_config.swa_window_size against the published"
        " drafter)"
    )


def _checks(
    batches: Sequence[Measurement],
    criteria: GateCriteria,
    confidence: float,
    merged: Sequence[int],
) -> list[_Check]:
    """The mean-length check first, then position 1 when it has a minimum."""
    measured = [m for m in batches if m.drafts]
    lengths = [
        Batch(m.drafts, 1 + m.accepted / m.drafts, m.accepted_length_variance or 0.0)
        for m in measured
    ]
    checks = [
        _Check(
            "mean acceptance length",
            batch_means_interval(lengths, confidence, merged),
            criteria.min_mean_acceptance_length,
        )
    ]
    if criteria.min_position1_acceptance is not None:
        shares = [(m.drafts, 1 - m.accepted_length_counts[0] / m.drafts) for m in measured]
        firsts = [Batch(drafts, share, share * (1 - share)) for drafts, share in shares]
        checks.append(
            _Check(
                "position-1 acceptance",
                batch_means_interval(firsts, confidence, merged),
                criteria.min_position1_acceptance,
            )
        )
    return checks


def _verdict(
    outcome: VerdictOutcome, total: Measurement, length: Interval | None, reason: str
) -> Verdict:
    return Verdict(
        outcome=outcome,
        mean_acceptance_length=total.mean_acceptance_length,
        lower=length.lower if length else None,
        upper=length.upper if length else None,
        per_position_acceptance=total.per_position_acceptance or (),
        drafts=total.drafts,
        reason=reason,
    )
