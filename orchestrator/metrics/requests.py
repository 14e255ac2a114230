"""Acceptance per probe request: each response's own `metrics.speculative_decoding`.

With `--per-request-spec-decode-metrics summary` (vLLM 0.29.0 on,
`vllm/config/observability.py:48`) every completion and chat response carries
the histogram of its own verify steps: `acceptance_histogram[j]` counts the
steps that accepted exactly j draft tokens, the bonus token excluded
(`vllm/v1/metrics/stats.py` RequestSpecDecodeMetrics.to_dict,
`vllm/entrypoints/generate/base/protocol.py` SpeculativeDecodingMetrics). Other
clients' traffic never enters these figures, and a phase needs no quiet server.

Statistics: the drafts of one request are correlated, requests are not, so
each request is one batch of the batch-means bound. Requests are judged in the
order they were sent, up to the first one still in flight: requests that draft
well produce their tokens in fewer steps and finish first, so judging whatever
has finished would lean towards them. The gate looks at 4, 8, 16, ... judged
requests (the first look, once `min_drafts` are in, may only fail; a pass needs
MIN_REQUESTS), each look at its own share of the error
(`look_confidence`: 98.75%, 95%, 98.75%, 99.375%, ... two-sided at the 95%
setting), so all looks together err less than `1 - confidence` on each side
(Bonferroni).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.metrics.assess import GateCriteria, Verdict, assess
from orchestrator.metrics.evaluate import Measurement, combine
from orchestrator.metrics.figures import MAX_COUNT, is_count

FIGURES = "metrics.speculative_decoding"
MIN_REQUESTS = 8
"""Requests with drafts before a look may pass: fewer give bounds too narrow for requests
whose acceptance differs by kind (the simulation in tests/unit/test_metrics_requests.py
false-passes 7% of gates at the threshold from 3, 4% from 5, 2% from 8)."""
FIRST_LOOK = 4
"""Requests with drafts before the first look, which fails only a drafter far below the
bar (`_gross_failure`): a broken drafter's requests are the slowest (no token comes
early), so waiting for eight of them at field speed would double the time to its verdict."""
GROWTH = 2
"""Looks are at FIRST_LOOK times a power of GROWTH requests."""
INDEPENDENT = (1,)
"""Requests are independent batches: no merging of neighbours (see `stats`)."""


class FiguresMissing(ValueError):
    """A response without `metrics.speculative_decoding`: the server does not report it."""


class FiguresMalformed(ValueError):
    """`metrics.speculative_decoding` whose counts contradict each other."""


def request_measurement(body: Any) -> Measurement:
    """One response's drafts, by how many tokens each accepted."""
    metrics = body.get("metrics") if isinstance(body, dict) else None
    figures = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if figures is None:
        raise FiguresMissing(f"the response has no {FIGURES}")
    if not isinstance(figures, dict):
        raise FiguresMalformed(f"{FIGURES} is not an object")
    histogram = figures.get("acceptance_histogram")
    if not isinstance(histogram, list) or not all(is_count(n) for n in histogram):
        raise FiguresMalformed(
            f"{FIGURES}.acceptance_histogram is not a list of counts (0..{MAX_COUNT})"
        )
    draft_tokens = figures.get("num_draft_tokens")
    if not is_count(draft_tokens):
        raise FiguresMalformed(f"{FIGURES}.num_draft_tokens is not a count (0..{MAX_COUNT})")
    measurement = Measurement(tuple(histogram), draft_tokens)
    stated = (figures.get("num_spec_steps"), figures.get("num_accepted_draft_tokens"))
    if stated != (measurement.drafts, measurement.accepted):
        raise FiguresMalformed(
            f"{FIGURES} states {stated[0]} steps and {stated[1]} accepted tokens, its "
            f"histogram {measurement.drafts} and {measurement.accepted}"
        )
    if measurement.accepted > draft_tokens:
        raise FiguresMalformed(f"{FIGURES} accepts more tokens than were drafted")
    return measurement


def look_confidence(criteria: GateCriteria, look: int) -> float:
    """Two-sided confidence of look `look` (1, 2, ...). Of the one-sided error 1 - c
    (c = `criteria.confidence`), look 1 (fail only) spends 1/8, look 2 (the first that
    may pass) 1/2, look k > 2 1/2^k: at most 7/8 of it in all, on each side."""
    share = {1: 1 / 8, 2: 1 / 2}.get(look, 1 / 2**look)
    return 1 - 2 * (1 - criteria.confidence) * share


@dataclasses.dataclass
class RequestLedger:
    """One phase's responses, judged in the order the requests were sent."""

    criteria: GateCriteria
    judged: list[Measurement] = dataclasses.field(default_factory=list)
    """The finished prefix of the requests as sent."""
    looks: int = 0
    last_look: Verdict | None = None
    _total: Measurement = dataclasses.field(default_factory=lambda: Measurement((), 0))
    _waiting: dict[int, Measurement] = dataclasses.field(default_factory=dict)
    _measured: int = 0
    _looked_at: int = 0

    def record(self, sent: int, measurement: Measurement) -> None:
        """The figures of the request sent `sent`-th (0-based); a failed request is an
        empty measurement, so the prefix moves past it."""
        self._waiting[sent] = measurement
        while len(self.judged) in self._waiting:
            arrived = self._waiting.pop(len(self.judged))
            self.judged.append(arrived)
            self._total = combine([self._total, arrived])
            self._measured += bool(arrived.drafts)

    @property
    def total(self) -> Measurement:
        """Every judged draft together."""
        return self._total

    def next_look(self) -> int:
        """Requests with drafts the next look waits for (besides `min_drafts`): the looks
        are at FIRST_LOOK x 2^j requests, whenever `min_drafts` lets the first one be."""
        point = FIRST_LOOK
        while point <= self._looked_at:
            point *= GROWTH
        return point

    def _gross_failure(self, verdict: Verdict) -> bool:
        """A failure whose upper bound leaves less than half the gain the bar asks for
        (the field's misaligned drafter: 1.1 against 2.5). A few requests of a drafter
        near the bar can all come from its weaker kind of prompt; they never look
        like that."""
        required = self.criteria.min_mean_acceptance_length
        return (
            verdict.outcome == "fail"
            and verdict.upper is not None
            and verdict.upper < 1 + (required - 1) / 2
        )

    def judge(self) -> Verdict:
        """A look's verdict when one is due, else the figures so far, undecided, with the
        last look's bounds."""
        drafts = self._total.drafts
        if drafts >= self.criteria.min_drafts and self._measured >= self.next_look():
            self.looks += 1
            self._looked_at = self._measured
            confidence = look_confidence(self.criteria, self.looks)
            self.last_look = assess(self.judged, self.criteria, confidence, INDEPENDENT)
            if self._measured < MIN_REQUESTS and not self._gross_failure(self.last_look):
                self.last_look = dataclasses.replace(
                    self.last_look,
                    outcome="inconclusive",
                    reason=f"not enough evidence yet: before {MIN_REQUESTS} requests only a "
                    f"drafter far below the bar fails ({self.last_look.reason})",
                )
            return self.last_look
        waits = [f"{self.next_look()} requests"] * (self._measured < self.next_look())
        waits += [f"{self.criteria.min_drafts} drafts"] * (drafts < self.criteria.min_drafts)
        mean = self._total.mean_acceptance_length
        so_far = f" (mean acceptance length {mean:.2f} so far)" if mean else ""
        last = self.last_look
        return Verdict(
            outcome="inconclusive",
            mean_acceptance_length=mean,
            lower=last.lower if last else None,
            upper=last.upper if last else None,
            per_position_acceptance=self._total.per_position_acceptance or (),
            drafts=drafts,
            reason=f"not enough evidence yet: {drafts} drafts in {self._measured} requests, "
            f"the next look at {' and '.join(waits)}{so_far}",
        )
