"""What the gate reports: each phase's figures and the verdict over them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import field
from typing import Annotated, Any

import pydantic
from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from orchestrator.durations import Seconds
from orchestrator.metrics.advice import Advice
from orchestrator.metrics.assess import (
    FailureCauses,
    GateCriteria,
    Verdict,
    explain,
    explain_context,
)
from orchestrator.metrics.evaluate import Measurement, combine
from orchestrator.metrics.speed import Figure
from orchestrator.metrics.speedup import NO_REFERENCE, SpeedOutcome, SpeedReference
from orchestrator.probes.context import LONG, SHORT, ContextBucket
from orchestrator.probes.endpoints import Endpoint
from orchestrator.serving.acceptance_source import COUNTED

PER_REQUEST, COUNTERS = "per_request", "counters"
SOURCES = {
    PER_REQUEST: "per-request figures (metrics.speculative_decoding)",
    COUNTERS: "/metrics counter deltas",
}
"""Where a verdict's figures came from, in the report's words."""


def source_note(asked: str, missing: str = "") -> str:
    """Why the gate read the figures it read: the playbook's `gate.acceptance_source`
    (`asked`), and what the server's responses carried (`missing`: why they had no
    per-request figures, "" when they had them or were not asked for)."""
    setting = f"gate.acceptance_source: {asked}"
    if asked == COUNTERS:
        return f"{setting}; {COUNTED}"
    if missing:
        return (
            f"{setting}, but the server's responses carry no per-request figures "
            f"({missing}): its launch lacks --per-request-spec-decode-metrics, or its vLLM "
            f"predates 0.29.0; judged by {SOURCES[COUNTERS]}: {COUNTED}"
        )
    return f"{setting}: each response's own figures, which other clients' requests never enter"


Tick = Callable[[str], None]
"""Hears the gate's figures so far, one line a phase."""


@pydantic.dataclasses.dataclass(config=ConfigDict(serialize_by_alias=True))
class PhaseReport:
    """One context bucket on one endpoint, measured from its own requests' figures, or
    from its own counter deltas.

    `seconds` runs from the phase's start to its verdict. With counters the
    requests still in flight then are waited for before the next phase starts;
    with per-request figures they are cancelled.
    """

    bucket: Annotated[ContextBucket, Field(exclude=True)]
    endpoint: Annotated[Endpoint, Field(exclude=True)]
    verdict: Annotated[Verdict, Field(exclude=True)]
    requests: int = 0
    request_errors: int = 0
    cancelled: Annotated[int, Field(serialization_alias="cancelled_requests")] = 0
    """Requests in flight when the phase decided, cancelled (per-request figures)."""
    source: str = COUNTERS
    seconds: Seconds = 0.0
    prompt_tokens: Annotated[tuple[int, int] | None, Field(exclude=True)] = None
    batches: Annotated[list[Measurement], Field(exclude=True)] = field(default_factory=list)
    refused: Annotated[str | None, Field(exclude=True)] = None
    """The server refused the probes' key (HTTP 401): not measured, and said why."""

    @property
    def label(self) -> str:
        return f"{self.bucket.describe()} via {self.endpoint.describe()}"

    def outside_bucket(self) -> str:
        """Says so when the server counted prompts outside the bucket (another tokenizer)."""
        if self.prompt_tokens is None:
            return ""
        low, high = self.prompt_tokens
        upper = self.bucket.max_tokens
        if low >= self.bucket.min_tokens and (upper is None or high <= upper):
            return ""
        return f"the server counted {low}..{high} prompt tokens: outside this bucket"

    @model_serializer(mode="wrap")
    def _as_row(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """A phase reads as one row of the report's table: where it probed and what it
        measured lead, its traffic (the stored fields) follows."""
        bucket, verdict = self.bucket, self.verdict
        return {
            "context": bucket.name,
            "min_tokens": bucket.min_tokens,
            "max_tokens": bucket.max_tokens,
            "endpoint": self.endpoint.path,
            "chat_template_kwargs": self.endpoint.settings(),
            "prompt_tokens_seen": list(self.prompt_tokens) if self.prompt_tokens else None,
            "drafts": verdict.drafts,
            "mean_acceptance_length": verdict.mean_acceptance_length,
            "lower": verdict.lower,
            "upper": verdict.upper,
            "per_position_acceptance": list(verdict.per_position_acceptance),
            "verdict": verdict.outcome,
            "reason": verdict.reason,
            "note": "; ".join(filter(None, [bucket.note, self.outside_bucket()])),
            **handler(self),
        }

    def progress(self, criteria: GateCriteria) -> str:
        """This phase's figures so far against what it needs, in one short line."""
        verdict = self.verdict
        head = f"{self.bucket.name} {self.endpoint.name}: {verdict.drafts} drafts"
        if verdict.mean_acceptance_length is None:
            return head
        bound = verdict.upper if verdict.outcome == "fail" else verdict.lower
        which = "upper" if verdict.outcome == "fail" else "lower"
        shown = f", {which} bound {bound:.2f}" if bound is not None else ""
        done = {"pass": " passed", "fail": " failed"}.get(verdict.outcome, "")
        return (
            f"{head}, mean {verdict.mean_acceptance_length:.2f}{shown}, required "
            f"{criteria.min_mean_acceptance_length:.2f}{done}"
        )


@pydantic.dataclasses.dataclass(config=ConfigDict(serialize_by_alias=True))
class SpeedLevel:
    """Speed at one level of concurrent streams: what was sent, what it measured, the
    batch the server ran meanwhile, and the level's verdict against the reference.

    `requests` counts the finished requests the figures come from; those in flight
    when the level had measured enough were cancelled."""

    concurrency: int
    requests: int = 0
    request_errors: int = 0
    cancelled_requests: int = 0
    seconds: Seconds = 0.0
    output_tokens: int = 0
    time_to_first_token: Seconds | None = None
    """Mean seconds from sending to the first token (None: the server did not stream)."""
    per_stream_tokens_per_second: Figure | None = None
    total_tokens_per_second: Figure | None = None
    batch_measured: float | None = None
    """Mean `vllm:num_requests_running` read during the level (None: not read)."""
    foreign_share: float | None = None
    """Share of that batch beyond the gate's own requests in flight."""
    speedup: Figure | None = None
    verdict: SpeedOutcome = "not_judged"
    reason: str = ""


@pydantic.dataclasses.dataclass(config=ConfigDict(serialize_by_alias=True))
class SpeedReport:
    """The speed phase: its levels and the verdict over them against the reference
    (`not_judged`: no reference, the figures are recorded and block nothing)."""

    verdict: SpeedOutcome = "not_judged"
    reason: str = NO_REFERENCE
    reference: SpeedReference | None = None
    streamed: bool = True
    """False: the server refused streamed requests; each was timed whole, so decode
    time includes the time to the first token."""
    note: str | None = None
    max_tokens: int = 0
    requests: int = 0
    """Every speed request sent, the first included (it tells whether the server streams,
    and warms it), cancelled ones not."""
    output_tokens: int = 0
    seconds: Seconds = 0.0
    levels: list[SpeedLevel] = field(default_factory=list)


@pydantic.dataclasses.dataclass(config=ConfigDict(serialize_by_alias=True))
class GateReport:
    """The gate's outcome over its phases.

    The top-level figures are the deciding phase's when one failed or stayed
    undecided; when every phase passed they are all phases' drafts together,
    with the weakest phase's bounds.
    """

    verdict: Verdict
    source: str | None = None
    """Where the verdict's figures came from (None: no probe was sent)."""
    note: Annotated[str | None, Field(serialization_alias="source_note")] = None
    """Why the figures came from `source` (None: no probe was sent)."""
    criteria: GateCriteria | None = None
    sampling: dict[str, Any] | None = None
    """The sampling fields every probe request carried: the figures hold under it (None:
    no probe was sent, the server never became ready)."""
    explanation: str | None = None
    requests: int = 0
    request_errors: int = 0
    scrape_errors: int = 0
    resets: Annotated[int, Field(serialization_alias="counter_resets")] = 0
    seconds: Seconds = 0.0
    phases: Annotated[list[PhaseReport], Field(serialization_alias="by_context")] = field(
        default_factory=list
    )
    advice: Advice | None = None
    speed: SpeedReport | None = None
    """The speed levels (None: not measured: `gate.speed.enabled` false, acceptance did
    not pass, or the gate was interrupted before them)."""

    @model_serializer(mode="wrap")
    def _verdict_first(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """The verdict's fields lead, flat: `gate.verdict`, `gate.reason`, as the gate's
        figures are read everywhere."""
        fields = handler(self)
        return {**fields.pop("verdict"), **fields}


def progress_lines(phases: Sequence[PhaseReport], criteria: GateCriteria) -> str:
    """Every phase's figures so far, one line each (the step view shows them live)."""
    return "\n".join(phase.progress(criteria) for phase in phases)


def overall_verdict(phases: Sequence[PhaseReport]) -> Verdict:
    """Fail on any failed phase, pass when every phase passed, else undecided.

    Phases stop early only after a phase that did not pass, so passing phases
    are all the planned ones.
    """
    deciding = next((p for p in phases if p.verdict.outcome == "fail"), None) or next(
        (p for p in phases if p.verdict.outcome != "pass"), None
    )
    if deciding is not None:
        verdict = deciding.verdict
        return dataclasses.replace(verdict, reason=f"{deciding.label}: {verdict.reason}")
    total = combine(batch for phase in phases for batch in phase.batches)
    weakest = min(phases, key=lambda p: p.verdict.lower or 0.0).verdict
    return Verdict(
        outcome="pass",
        mean_acceptance_length=total.mean_acceptance_length,
        lower=weakest.lower,
        upper=weakest.upper,
        per_position_acceptance=total.per_position_acceptance or (),
        drafts=total.drafts,
        reason="every phase passed: " + "; ".join(f"{p.label}: {p.verdict.reason}" for p in phases),
    )


def explain_phases(
    phases: Sequence[PhaseReport], verdict: Verdict, causes: FailureCauses
) -> str | None:
    """Short contexts passing where long ones fail names the sliding window; else the
    failed phase's per-position curve names its likely cause."""
    failed = next((p for p in phases if p.verdict.outcome == "fail"), None)
    if failed is None:
        return None
    if failed.bucket.name == LONG:
        short = next(
            (p for p in phases if p.bucket.name == SHORT and p.endpoint == failed.endpoint), None
        )
        if short is not None:
            reason = explain_context(short.verdict, failed.verdict, failed.bucket.window)
            if reason:
                return reason
    return explain(verdict, causes)


def speed_lines(speed: SpeedReport | None) -> list[str]:
    """A gate's speed phase as printed: the verdict, then one line a level with its
    figures, batch, speedup and verdict."""
    if speed is None:
        return []
    lines = [f"speed {speed.verdict}: {speed.reason}"]
    if speed.note:
        lines.append(f"speed: {speed.note}")
    for level in speed.levels:
        streams = f"{level.concurrency} stream{'s' if level.concurrency != 1 else ''}"
        total, per_stream = level.total_tokens_per_second, level.per_stream_tokens_per_second
        if total is None or per_stream is None:
            lines.append(f"speed at {streams}: {level.reason}")
            continue
        batch = (
            f"batch {level.batch_measured:.1f} ({level.foreign_share or 0:.0%} foreign)"
            if level.batch_measured is not None
            else "batch not read"
        )
        speedup = f", speedup {_figure(level.speedup, 'x')}" if level.speedup else ""
        lines.append(
            f"speed at {streams}: {_figure(total, ' tok/s')} in all, "
            f"{_figure(per_stream, ' tok/s')} per stream, {batch}{speedup} "
            f"({level.requests} requests, {level.seconds:.1f} s): {level.verdict}"
        )
    return lines


def _figure(figure: Figure, unit: str) -> str:
    """Tokens per second whole, speedups to two decimals, each with its bound."""
    digits = 2 if unit == "x" else 0
    bounds = figure.lower is not None and figure.upper is not None
    shown = f" ({figure.lower:.{digits}f}-{figure.upper:.{digits}f})" if bounds else ""
    return f"{figure.mean:.{digits}f}{unit}{shown}"
