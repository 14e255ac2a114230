"""Speed from streamed requests: per-stream decode speed and the server's total output
tokens per second at one level of concurrent streams, each with a confidence bound.

The independent samples are requests, never tokens: the tokens of one request share
its prompt, its batch and its drafts. Per-stream decode speed is the tokens after the
first over the seconds between first and last token, summed over requests: a ratio
estimator, so a request whose chunks arrived together (a few milliseconds apart,
coalesced on the way) weighs by its seconds instead of dominating a mean of per-request
speeds. The total is Little's law for a closed loop that keeps `c` requests in flight: c x (sum of
tokens) / (sum of latencies), a ratio estimator over requests with its delta-method
variance, so a level needs no clock beside its requests' own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

import pydantic

from orchestrator import remotejson
from orchestrator.metrics.figures import MAX_COUNT, is_count, shown
from orchestrator.metrics.stats import student_t_quantile

DONE = "[DONE]"


class StreamMalformed(ValueError):
    """A streamed completion that does not read as vLLM's: it measured nothing."""


@pydantic.dataclasses.dataclass(frozen=True)
class Figure:
    """A mean with its two-sided confidence bounds (None from fewer than two requests)."""

    mean: float
    lower: float | None = None
    upper: float | None = None

    def relative_half_width(self) -> float | None:
        """Half the bound's width over the mean (None: no bounds, or a mean of zero)."""
        if self.lower is None or self.upper is None or self.mean <= 0:
            return None
        return (self.upper - self.lower) / 2 / self.mean


@dataclass(frozen=True)
class StreamedRequest:
    """One finished streamed request: seconds from sending to its first and its last
    token, and the output tokens the server counted (its `usage`)."""

    first_token: float
    last_token: float
    tokens: int

    @property
    def decode_speed(self) -> float | None:
        """Tokens after the first per second (None: one token, or all in one chunk)."""
        seconds = self.last_token - self.first_token
        return (self.tokens - 1) / seconds if self.tokens > 1 and seconds > 0 else None


def streamed_request(events: Sequence[tuple[float, str]]) -> StreamedRequest:
    """A streamed completion read from its server-sent events: each `data:` payload with
    the seconds after sending it arrived. Text chunks time the tokens; the usage chunk
    (`stream_options.include_usage`) counts them, since a chunk may carry several."""
    texts: list[float] = []
    tokens: int | None = None
    for arrived, data in events:
        if data.strip() == DONE:
            break
        try:
            chunk = remotejson.loads(data)
        except ValueError:
            raise StreamMalformed(f"an event is not JSON: {data[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise StreamMalformed(f"an event is not an object: {data[:80]!r}")
        if any(_text(choice) for choice in chunk.get("choices") or ()):
            texts.append(arrived)
        usage = chunk.get("usage")
        if isinstance(usage, dict) and "completion_tokens" in usage:
            tokens = completion_tokens(usage["completion_tokens"])
    if tokens is None:
        raise StreamMalformed("no usage chunk: the stream did not count its tokens")
    if not texts:
        raise StreamMalformed("no text chunk: the stream carried no token")
    return StreamedRequest(texts[0], texts[-1], tokens)


def completion_tokens(value: object) -> int:
    """The tokens a response's usage counts, a count within bounds."""
    if not is_count(value):
        raise StreamMalformed(
            f"usage.completion_tokens is {shown(value)}, not a count (0..{MAX_COUNT})"
        )
    return value


def _text(choice: object) -> bool:
    return isinstance(choice, dict) and bool(choice.get("text"))


def ratio_interval(
    numerators: Sequence[float], denominators: Sequence[float], confidence: float
) -> Figure:
    """sum(numerators) / sum(denominators) over independent pairs, with the ratio
    estimator's delta-method interval: var = s^2(n_i - R d_i) / (count x mean(d)^2)."""
    if not numerators or len(numerators) != len(denominators) or sum(denominators) <= 0:
        raise ValueError("a ratio needs pairs with a positive total denominator")
    ratio = sum(numerators) / sum(denominators)
    count = len(numerators)
    if count < 2:
        return Figure(ratio)
    residuals = [n - ratio * d for n, d in zip(numerators, denominators, strict=True)]
    spread = sum(r * r for r in residuals) / (count - 1)
    half = _quantile(confidence, count) * math.sqrt(spread / count) / fmean(denominators)
    return Figure(ratio, ratio - half, ratio + half)


def _quantile(confidence: float, count: int) -> float:
    return student_t_quantile((1 + confidence) / 2, count - 1)


@dataclass(frozen=True)
class LevelFigures:
    """One level's figures from its finished requests."""

    per_stream: Figure
    """Decode speed of one stream, tokens after the first per second."""
    total: Figure
    """The server's output tokens per second with `concurrency` streams in flight."""
    time_to_first_token: float
    output_tokens: int


def level_figures(
    concurrency: int, requests: Sequence[StreamedRequest], confidence: float
) -> LevelFigures | None:
    """The level's figures (None: no finished request decoded past its first token)."""
    decoding = [r for r in requests if r.decode_speed is not None]
    if not decoding:
        return None
    per_stream = ratio_interval(
        [r.tokens - 1 for r in decoding],
        [r.last_token - r.first_token for r in decoding],
        confidence,
    )
    total = ratio_interval(
        [r.tokens for r in requests], [r.last_token for r in requests], confidence
    )
    return LevelFigures(
        per_stream=per_stream,
        total=_scaled(total, concurrency),
        time_to_first_token=fmean(r.first_token for r in requests),
        output_tokens=sum(r.tokens for r in requests),
    )


def _scaled(figure: Figure, factor: float) -> Figure:
    return Figure(
        figure.mean * factor,
        None if figure.lower is None else figure.lower * factor,
        None if figure.upper is None else figure.upper * factor,
    )


def precise_enough(figures: LevelFigures | None, precision: float) -> bool:
    """The judged figure (the total, which the speed verdict compares: speedup.py)
    within `precision` of its mean, relative: the level may stop. The per-stream
    figure is reported with the bound it reached: a stream's decode time is the
    noisiest figure of a level (a request's first and last chunk, timed by a client
    that may wait for a CPU), and it decides nothing."""
    if figures is None:
        return False
    width = figures.total.relative_half_width()
    return width is not None and width <= precision


@dataclass(frozen=True)
class BatchSample:
    """One read of `vllm:num_requests_running` beside the gate's own requests in flight."""

    running: int
    own: int


def batch_measured(samples: Sequence[BatchSample]) -> tuple[float, float] | None:
    """The mean batch the server ran during a level and the share of it that was other
    clients' requests (running beyond the gate's own, never below zero); None when
    no read saw a batch."""
    running = sum(s.running for s in samples)
    if running <= 0:
        return None
    foreign = sum(max(0, s.running - s.own) for s in samples)
    return running / len(samples), foreign / running
