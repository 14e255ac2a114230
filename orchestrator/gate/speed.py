"""The gate's speed levels on a live server: at each level of `gate.speed`, keep that
many streamed completions in flight, read the server's running batch beside them, and
stop as soon as the judged figure's bound is tight enough (`metrics/speed.py` computes
them).

`measure_speed` needs no speculation and no reference: it measures any server, so a
baseline (the target served without its drafter) is measured by the same code.

A server that refuses streamed requests (HTTP 4xx to the first one) is timed by whole
requests, and the report says so: its decode time then includes the time to the
first token.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.deadline import Deadline
from orchestrator.errors import OrchError
from orchestrator.gate.probe import REQUEST_SECONDS, Target
from orchestrator.gate.report import SpeedLevel, SpeedReport, Tick
from orchestrator.gate.scrape import ScrapeFailed, scrape_running
from orchestrator.metrics.speed import (
    BatchSample,
    StreamedRequest,
    StreamMalformed,
    batch_measured,
    completion_tokens,
    level_figures,
    precise_enough,
    streamed_request,
)
from orchestrator.metrics.speedup import (
    MeasuredSpeed,
    SpeedCriteria,
    SpeedReference,
    judge_level,
    speed_outcome,
)
from orchestrator.playbook_speed import Speed
from orchestrator.probes.endpoints import Endpoint
from orchestrator.transport import http

COMPLETIONS = Endpoint("completions")
STREAM_FIELDS = {"stream": True, "stream_options": {"include_usage": True}}
BATCH_READ_SECONDS = 0.1
"""Between reads of the running batch during a level (and checks of its precision)."""
MIN_ROUNDS = 2
"""A level measures at least this many requests per stream before it may stop."""
FAILING = 3
"""Failed requests after which a level whose requests mostly fail stops."""


@dataclass(frozen=True)
class SpeedTraffic:
    """What every speed request carries."""

    prompts: Sequence[str]
    max_tokens: int
    sampling: dict[str, Any]


@dataclass(eq=False)
class _Level:
    """One level's traffic: `concurrency` workers sending until the level has measured
    enough (checked at every finished request), is stopped, or is out of budget."""

    target: Target
    traffic: SpeedTraffic
    concurrency: int
    speed: Speed
    confidence: float
    deadline: Deadline
    streamed: bool
    finished: list[StreamedRequest] = field(default_factory=list)
    samples: list[BatchSample] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    sent: int = 0
    in_flight: int = 0
    cancelled: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)
    streams: http.InFlight = field(default_factory=http.InFlight)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _take(self) -> str | None:
        with self.lock:
            if self.sent >= self.speed.max_requests or self.stopped.is_set():
                return None
            self.sent += 1
            self.in_flight += 1
            prompts = self.traffic.prompts
            return prompts[self.sent % len(prompts)]

    def worker(self) -> None:
        while (prompt := self._take()) is not None:
            try:
                timed: StreamedRequest | str = send(
                    self.target, self.traffic, prompt, self.streamed, self.deadline, self.streams
                )
            except OrchError as exc:
                timed = str(exc)
            with self.lock:
                self.in_flight -= 1
                if self.stopped.is_set() and isinstance(timed, str):
                    return  # cancelled: the level has measured enough
                if isinstance(timed, str):
                    self.errors += 1
                    self.first_error = self.first_error or timed[:200]
                else:
                    self.finished.append(timed)
                enough = self._enough()
            if enough:
                self.stop()
            elif isinstance(timed, str):
                self.deadline.pause(0.2)

    def _enough(self) -> bool:
        """MIN_ROUNDS requests per stream, a batch read, and the total's bound within
        `speed.precision` (under the lock)."""
        if len(self.finished) < self.concurrency * MIN_ROUNDS or not batch_measured(self.samples):
            return False
        figures = level_figures(self.concurrency, self.finished, self.confidence)
        return precise_enough(figures, self.speed.precision)

    def read_batch(self) -> None:
        """One read of the server's running batch beside the level's own requests (the
        server counted it while the read was under way: the larger own count holds)."""
        before = self.own()
        target = self.target
        try:
            running = scrape_running(target.transport, target.address, target.port, self.deadline)
        except ScrapeFailed:
            return
        with self.lock:
            self.samples.append(BatchSample(running, max(before, self.in_flight)))

    def failing(self) -> bool:
        with self.lock:
            return self.errors >= FAILING and self.errors > len(self.finished)

    def own(self) -> int:
        with self.lock:
            return self.in_flight

    def stop(self) -> None:
        """No new requests, the ones in flight cancelled (counted the first time)."""
        with self.lock:
            if not self.stopped.is_set():
                self.cancelled = self.in_flight
            self.stopped.set()
        self.streams.close()


def send(
    target: Target,
    traffic: SpeedTraffic,
    prompt: str,
    streamed: bool,
    deadline: Deadline,
    streams: http.InFlight | None = None,
) -> StreamedRequest | str:
    """One speed request, timed: its figures, or why it measured nothing."""
    payload = COMPLETIONS.payload(target.served_name, prompt, traffic.max_tokens, traffic.sampling)
    headers = target.key.header() if target.key else None
    timeout = deadline.limit(REQUEST_SECONDS)
    events: list[tuple[float, str]] = []
    clock = deadline.clock
    sent = clock.now()
    if streamed:
        response = http.stream_events(
            target.transport,
            target.address,
            target.port,
            COMPLETIONS.path,
            {**payload, **STREAM_FIELDS},
            lambda data: events.append((clock.now() - sent, data)),
            timeout=timeout,
            headers=headers,
            in_flight=streams,
        )
    else:
        response = http.request(
            target.transport,
            target.address,
            target.port,
            "POST",
            COMPLETIONS.path,
            payload,
            timeout=timeout,
            headers=headers,
            in_flight=streams,
        )
    if response.status != 200:
        answer = response.body.decode("utf-8", "replace").strip()[:200]
        return f"HTTP {response.status} from {COMPLETIONS.path}: {answer}"
    try:
        return streamed_request(events) if streamed else whole_request(response, clock.now() - sent)
    except StreamMalformed as exc:
        return f"{COMPLETIONS.path}: {exc}"


def whole_request(response: http.HttpResponse, elapsed: float) -> StreamedRequest:
    """A request the server answered whole in `elapsed` seconds: every token counted as
    arriving at the end, the first one at once (decode time includes the time to the
    first token)."""
    try:
        tokens = response.json()["usage"]["completion_tokens"]
    except (ValueError, KeyError, TypeError):
        raise StreamMalformed("the response carries no usage.completion_tokens") from None
    return StreamedRequest(0.0, elapsed, completion_tokens(tokens))


def measure_speed(
    target: Target,
    speed: Speed,
    traffic: SpeedTraffic,
    confidence: float,
    deadline: Deadline,
    tick: Tick = lambda _: None,
) -> SpeedReport:
    """Every level of `speed`, one after another within the deadline, unjudged."""
    started = deadline.clock.now()
    report = SpeedReport(max_tokens=traffic.max_tokens)
    try:
        first = send(target, traffic, traffic.prompts[0], True, deadline)
    except OrchError as exc:
        first = str(exc)
    if isinstance(first, str) and first.startswith("HTTP 4") and not first.startswith("HTTP 401"):
        report.streamed = False
        report.note = f"the server refused a streamed request ({first}): timed whole requests"
    levels = speed.levels()
    for index, concurrency in enumerate(levels):
        if deadline.cancel.is_set():
            break
        share = Deadline.after(
            deadline.remaining() / (len(levels) - index), deadline.cancel, deadline.clock
        )
        level = _Level(target, traffic, concurrency, speed, confidence, share, report.streamed)
        report.levels.append(_measure_level(level, tick))
    report.requests = 1 + sum(level.requests + level.request_errors for level in report.levels)
    report.output_tokens = sum(level.output_tokens for level in report.levels)
    report.output_tokens += first.tokens if isinstance(first, StreamedRequest) else 0
    report.seconds = deadline.clock.now() - started
    return report


def _measure_level(level: _Level, tick: Tick) -> SpeedLevel:
    """One level: its workers send and stop it once it has measured enough; the main
    thread reads the batch every BATCH_READ_SECONDS and stops it when its requests
    mostly fail or its time is up; a budget spent ends it too."""
    started = level.deadline.clock.now()
    workers = [threading.Thread(target=level.worker, daemon=True) for _ in range(level.concurrency)]
    for worker in workers:
        worker.start()
    try:
        while any(worker.is_alive() for worker in workers) and not level.stopped.is_set():
            if level.deadline.expired() or level.deadline.cancel.is_set() or level.failing():
                break
            level.read_batch()
            tick(f"speed at {level.concurrency} streams: {len(level.finished)} requests")
            level.deadline.pause(BATCH_READ_SECONDS)
    finally:
        level.stop()
        for worker in workers:
            worker.join(timeout=level.deadline.limit(REQUEST_SECONDS))
    return level_report(level, level.deadline.clock.now() - started)


def level_report(level: _Level, seconds: float) -> SpeedLevel:
    """The level's figures from its finished requests and the batches read beside them."""
    report = SpeedLevel(
        level.concurrency,
        requests=len(level.finished),
        request_errors=level.errors,
        cancelled_requests=level.cancelled,
        seconds=seconds,
        output_tokens=sum(r.tokens for r in level.finished),
    )
    figures = level_figures(level.concurrency, level.finished, level.confidence)
    if figures is None:
        report.reason = f"speed not measured: {level.first_error or 'no request decoded'}"
        return report
    report.per_stream_tokens_per_second = figures.per_stream
    report.total_tokens_per_second = figures.total
    report.time_to_first_token = figures.time_to_first_token if level.streamed else None
    batch = batch_measured(level.samples)
    if batch is not None:
        report.batch_measured, report.foreign_share = batch
    return report


def judge_speed(
    report: SpeedReport, reference: SpeedReference | None, criteria: SpeedCriteria
) -> None:
    """Each level's verdict against the reference, and the phase's over them."""
    judgements = []
    for level in report.levels:
        measured = MeasuredSpeed(
            level.concurrency, level.total_tokens_per_second, level.foreign_share
        )
        judgement = judge_level(measured, reference, criteria)
        level.speedup, level.verdict = judgement.speedup, judgement.outcome
        level.reason = level.reason if level.total_tokens_per_second is None else judgement.reason
        judgements.append(judgement)
    report.reference = reference
    report.verdict, report.reason = speed_outcome(judgements)


def criteria_of(speed: Speed) -> SpeedCriteria:
    return SpeedCriteria(speed.min_speedup, speed.max_regression, speed.max_foreign_share)
