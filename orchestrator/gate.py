"""The acceptance gate on a live server: probe traffic, figures, verdict.

Every probe request carries the playbook's sampling (greedy by default), and the
report records it: acceptance depends on it as much as on the drafter.
The gate runs in phases, one per context bucket and endpoint (short prompts and
long ones past the drafter's sliding window; plain completions and chat as
production calls it), and reads acceptance from one of two sources
(`gate.acceptance_source`):

- `per_request`: every response carries its own figures
  (`metrics.requests`). All phases probe at once on worker threads; the main
  thread judges each phase as its responses arrive, and a decided phase's
  requests still in flight are cancelled (their streams closed); a failed phase
  stops every other. Other clients' traffic never enters the figures.
- `counters`: one phase after another, the main thread scraping /metrics every
  interval; each interval's counter deltas are one batch for `metrics.assess`.
  A phase waits for the previous one's requests to end, so its deltas are its
  own, and counts whatever else the server handles meanwhile. A server whose
  responses carry no figures is judged this way.

`tick` hears each phase's figures as they come (drafts, mean, bound, required):
the live view's last-seen column and the heartbeat in a pipe.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import pydantic
import tenacity
from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from orchestrator.deadline import SYSTEM_CLOCK, Clock, Deadline
from orchestrator.durations import Seconds
from orchestrator.errors import OrchError
from orchestrator.metrics.advice import Advice, speculative_tokens_advice
from orchestrator.metrics.assess import (
    FailureCauses,
    GateCriteria,
    RequestCriteria,
    Verdict,
    assess,
    explain,
    explain_context,
    judge_requests,
    no_spec_decode_verdict,
)
from orchestrator.metrics.evaluate import CounterReset, Measurement, combine, measure
from orchestrator.metrics.requests import (
    FiguresMalformed,
    FiguresMissing,
    RequestLedger,
    request_measurement,
)
from orchestrator.metrics.scrape import (
    ACCEPT,
    MetricsFormatError,
    SpecDecodeCounters,
    parse_spec_decode,
)
from orchestrator.playbook import Gate
from orchestrator.probes.context import LONG, SHORT, ContextBucket
from orchestrator.probes.endpoints import Endpoint, probe_endpoints
from orchestrator.probes.sampling import request_fields
from orchestrator.secrets import API_KEY, ProbeKey
from orchestrator.transport import http
from orchestrator.transport.base import Transport

PER_REQUEST, COUNTERS = "per_request", "counters"
SOURCES = {
    PER_REQUEST: "per-request figures (metrics.speculative_decoding)",
    COUNTERS: "/metrics counter deltas",
}
"""Where a verdict's figures came from, in the report's words."""
JOIN_SECONDS = 5.0
"""How long a decided phase's workers get to notice their closed streams."""
SCRAPE_ATTEMPTS = 3
SCRAPE_SECONDS = 15.0
REQUEST_SECONDS = 60.0
CONSECUTIVE_SCRAPE_FAILURES = 4
NO_SERIES_SCRAPES = 3


Tick = Callable[[str], None]
"""Hears the gate's figures so far, one line a phase."""


class ScrapeFailed(Exception):
    """/metrics could not be read or parsed: could not measure, not measured bad."""


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
    """Why the source differs from the playbook's, when it does."""
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

    @model_serializer(mode="wrap")
    def _verdict_first(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """The verdict's fields lead, flat: `gate.verdict`, `gate.reason`, as the gate's
        figures are read everywhere."""
        fields = handler(self)
        return {**fields.pop("verdict"), **fields}


@dataclass(frozen=True)
class _Target:
    """The server a gate probes, and the name it serves the target under."""

    transport: Transport
    address: str
    port: int
    served_name: str
    key: ProbeKey | None = None
    """Sent as `Authorization: Bearer` with every probe request (never with /metrics,
    which vLLM leaves open)."""


def refused_reason(key: ProbeKey | None, body: bytes) -> str:
    """A 401 to a probe: the key is wrong or missing, which says nothing on acceptance."""
    answer = body.decode("utf-8", "replace").strip()[:200]
    sent = (
        f"the key from {key.source} is not one the server accepts"
        if key
        else f"orch sent no key: give the server's key as server.secrets.{API_KEY}"
    )
    return f"the server refused the probe requests (HTTP 401 {answer}): {sent}"


@dataclass(frozen=True)
class _Answer:
    """One finished probe request: its place in the sending order and its figures (an
    empty measurement when it failed or, with counters, when none are read)."""

    sent: int
    measurement: Measurement
    missing: str = ""
    """Why a 200 response had no per-request figures."""


NO_FIGURES = Measurement((), 0)


class _Probe:
    """Bounded-concurrency requests on one endpoint until stopped or out of budget.

    With `answers`, each finished request is put there as an `_Answer` with the
    response's own figures; `stop()` ends the requests in flight as well.
    """

    def __init__(
        self,
        target: _Target,
        endpoint: Endpoint,
        prompts: Sequence[str],
        max_tokens: int,
        max_requests: int,
        deadline: Deadline,
        sampling: dict[str, Any],
        answers: queue.Queue[tuple[_Probe, _Answer]] | None = None,
    ) -> None:
        self.target, self.endpoint, self.max_tokens = target, endpoint, max_tokens
        self.sampling = sampling
        self.deadline = deadline
        self.answers = answers
        self._prompts = itertools.cycle(prompts)
        self._budget = max_requests
        self._lock = threading.Lock()
        self.stopped = threading.Event()
        self.in_flight = http.InFlight()
        self.sent = self.answered = self.errors = 0
        self.first_error = ""
        self.prompt_tokens: tuple[int, int] | None = None
        self.refused: str | None = None
        """Why the server refused a probe request (HTTP 401), if it did."""

    @classmethod
    def for_phase(
        cls,
        target: _Target,
        gate: Gate,
        bucket: ContextBucket,
        endpoint: Endpoint,
        deadline: Deadline,
        answers: queue.Queue[tuple[_Probe, _Answer]] | None = None,
    ) -> _Probe:
        """The probe of one phase as the playbook's gate sets it."""
        probe = gate.probe
        sampling = request_fields(probe.sampling)
        return cls(
            target,
            endpoint,
            bucket.prompts,
            probe.max_tokens,
            probe.max_requests,
            deadline,
            sampling,
            answers,
        )

    def workers(self, count: int) -> list[threading.Thread]:
        """`count` threads sending this probe's requests (not started)."""
        return [threading.Thread(target=self.worker, daemon=True) for _ in range(count)]

    def stop(self, cancel: bool = False) -> int:
        """No new requests; with `cancel` the ones in flight end too. Returns how many
        requests were in flight."""
        with self._lock:
            self.stopped.set()
            running = self.sent - self.answered - self.errors
        if cancel:
            self.in_flight.close()
        return running

    def _next_prompt(self) -> tuple[int, str] | None:
        with self._lock:
            if self._budget <= 0 or self.stopped.is_set():
                return None
            self._budget -= 1
            self.sent += 1
            return self.sent - 1, next(self._prompts)

    def worker(self) -> None:
        while (next_one := self._next_prompt()) is not None:
            sent, prompt = next_one
            target = self.target
            payload = self.endpoint.payload(
                target.served_name, prompt, self.max_tokens, self.sampling
            )
            try:
                response = http.request(
                    target.transport,
                    target.address,
                    target.port,
                    "POST",
                    self.endpoint.path,
                    payload,
                    timeout=self.deadline.limit(REQUEST_SECONDS),
                    headers=target.key.header() if target.key else None,
                    in_flight=self.in_flight,
                )
            except OrchError as exc:
                if self.stopped.is_set():
                    return  # cancelled: the phase has decided
                response, problem = None, str(exc)
            if response is not None and response.status == 200:
                try:
                    answer = self._answered(sent, response)
                except FiguresMalformed as exc:
                    response, problem = None, f"{self.endpoint.path}: {exc}"
                else:
                    with self._lock:
                        self.answered += 1
                    if self.answers is not None:
                        self.answers.put((self, answer))
                    continue
            if response is not None:
                problem = f"HTTP {response.status} from {self.endpoint.path}"
                if response.status == 401:
                    self.refused = refused_reason(target.key, response.body)
                    self.stopped.set()
            with self._lock:
                self.errors += 1
                self.first_error = self.first_error or problem[:200]
            if self.answers is not None:
                self.answers.put((self, _Answer(sent, NO_FIGURES)))
            self.deadline.pause(0.2)

    def _answered(self, sent: int, response: http.HttpResponse) -> _Answer:
        """The response's prompt length for the report and, when asked, its own figures
        (FiguresMalformed: the request measured nothing, an error)."""
        try:
            body = response.json()
        except ValueError:
            body = None
        self._count_prompt_tokens(body)
        if self.answers is None:
            return _Answer(sent, NO_FIGURES)
        try:
            return _Answer(sent, request_measurement(body))
        except FiguresMissing as exc:
            return _Answer(sent, NO_FIGURES, str(exc))

    def _count_prompt_tokens(self, body: Any) -> None:
        """The prompt lengths the server counted (its `usage`), for the report."""
        try:
            tokens = body["usage"]["prompt_tokens"]
        except (KeyError, TypeError):
            return
        if not isinstance(tokens, int):
            return
        with self._lock:
            low, high = self.prompt_tokens or (tokens, tokens)
            self.prompt_tokens = (min(low, tokens), max(high, tokens))


def scrape(
    transport: Transport, address: str, port: int, deadline: Deadline
) -> SpecDecodeCounters | None:
    """One /metrics read, retried on transport errors within the deadline; garbage is a
    ScrapeFailed."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(OrchError),
        wait=tenacity.wait_exponential(multiplier=0.1, max=1.0),
        stop=lambda state: state.attempt_number >= SCRAPE_ATTEMPTS or deadline.expired(),
        sleep=deadline.pause,
        reraise=True,
    )
    try:
        response = retrying(
            lambda: http.request(
                transport,
                address,
                port,
                "GET",
                "/metrics",
                timeout=deadline.limit(SCRAPE_SECONDS),
                headers={"Accept": ACCEPT},
            )
        )
    except OrchError as exc:
        raise ScrapeFailed(str(exc)) from None
    if response.status != 200:
        raise ScrapeFailed(f"/metrics answered HTTP {response.status}")
    try:
        return parse_spec_decode(response.body.decode("utf-8", "replace"))
    except MetricsFormatError as exc:
        raise ScrapeFailed(f"/metrics is not Prometheus text: {exc}") from None


def run_gate(
    transport: Transport,
    address: str,
    port: int,
    served_name: str,
    gate: Gate,
    buckets: Sequence[ContextBucket],
    causes: FailureCauses,
    stop: threading.Event | None = None,
    key: ProbeKey | None = None,
    tick: Tick = lambda _: None,
    clock: Clock = SYSTEM_CLOCK,
) -> GateReport:
    """Probe every context bucket on every endpoint, one phase each, within the budgets.

    Each phase sends at most `probe.max_requests`, `probe.concurrency` at a time.
    The first failed phase decides the gate; every phase must pass for the gate
    to pass. A set `stop` ends the gate inconclusive: a gate that was interrupted
    did not pass. Probe requests carry `key`; a 401 fails the gate saying so,
    with no word on acceptance. See the module for the two sources.
    """
    stop = stop or threading.Event()
    criteria = GateCriteria(
        gate.min_mean_acceptance_length,
        gate.min_position1_acceptance,
        gate.min_drafts,
        gate.confidence,
    )
    judged_by = (criteria, RequestCriteria(gate.min_probe_responses, gate.max_probe_error_share))
    endpoints = probe_endpoints(gate.probe.endpoints, gate.probe.chat_template_kwargs)
    phases = [(bucket, endpoint) for bucket in buckets for endpoint in endpoints]
    report = GateReport(
        assess([], criteria),
        sampling=request_fields(gate.probe.sampling),
        criteria=criteria,
        source=gate.acceptance_source,
    )
    started = clock.now()
    target = _Target(transport, address, port, served_name, key)
    if gate.acceptance_source == PER_REQUEST:
        deadline = Deadline.after(gate.time_budget, stop, clock)
        missing = _run_at_once(target, gate, judged_by, phases, deadline, report, tick)
        if missing:
            report.phases.clear()
            report.source = COUNTERS
            report.note = (
                f"the server's responses carry no per-request figures ({missing}): its launch "
                "lacks --per-request-spec-decode-metrics, or its vLLM predates 0.29.0; judged "
                f"by {SOURCES[COUNTERS]}"
            )
    if report.source == COUNTERS:
        for index, (bucket, endpoint) in enumerate(phases):
            left = len(phases) - index
            seconds = (gate.time_budget - (clock.now() - started)) / left
            deadline = Deadline.after(max(0.0, seconds), stop, clock)
            phase, go_on = _run_phase(
                target, gate, judged_by, bucket, endpoint, deadline, report, tick
            )
            report.phases.append(phase)
            if not go_on:
                break
    report.verdict = overall_verdict(report.phases)
    report.requests = sum(phase.requests for phase in report.phases)
    report.request_errors = sum(phase.request_errors for phase in report.phases)
    refused = next((p.refused for p in report.phases if p.refused), None)
    report.explanation = refused or explain_phases(report.phases, report.verdict, causes)
    if report.verdict.outcome == "pass":  # a failed drafter needs fixing, not tuning
        report.advice = speculative_tokens_advice(report.verdict.per_position_acceptance)
    report.seconds = clock.now() - started
    return report


def progress_lines(phases: Sequence[PhaseReport], criteria: GateCriteria) -> str:
    """Every phase's figures so far, one line each (the step view shows them live)."""
    return "\n".join(phase.progress(criteria) for phase in phases)


@dataclass(eq=False)
class _Running:
    """A phase probing beside the others: its report, its requests, its ledger."""

    phase: PhaseReport
    probe: _Probe
    ledger: RequestLedger
    workers: list[threading.Thread]
    clock: Clock
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock.now()

    def decide(self, verdict: Verdict, cancel: bool = True) -> None:
        """The phase's verdict, its time, and its requests in flight ended; its batches
        are the requests it judged."""
        self.phase.verdict = verdict
        self.phase.batches = list(self.ledger.judged)
        self.phase.seconds = self.clock.now() - self.started
        self.phase.cancelled = self.probe.stop(cancel)

    def out_of_traffic(self) -> bool:
        return not any(worker.is_alive() for worker in self.workers)


def _run_at_once(
    target: _Target,
    gate: Gate,
    judged_by: tuple[GateCriteria, RequestCriteria],
    phases: Sequence[tuple[ContextBucket, Endpoint]],
    deadline: Deadline,
    report: GateReport,
    tick: Tick,
) -> str:
    """Every phase probing at once, each judged from its own responses as they arrive.

    A phase ends at its verdict, its requests in flight cancelled; a failed phase
    ends the others. Returns why responses carry no per-request figures ("" when
    they do): the caller judges by counters instead.
    """
    criteria, request_criteria = judged_by
    answers: queue.Queue[tuple[_Probe, _Answer]] = queue.Queue()
    running: dict[_Probe, _Running] = {}
    for bucket, endpoint in phases:
        probe = _Probe.for_phase(target, gate, bucket, endpoint, deadline, answers)
        workers = probe.workers(gate.probe.concurrency)
        phase = PhaseReport(bucket, endpoint, assess([], criteria), source=PER_REQUEST)
        running[probe] = _Running(phase, probe, RequestLedger(criteria), workers, deadline.clock)
        report.phases.append(phase)
    undecided = set(running.values())
    try:
        for each in running.values():
            for worker in each.workers:
                worker.start()
        while undecided:
            try:
                probe, answer = answers.get(timeout=min(0.25, max(deadline.remaining(), 0.01)))
            except queue.Empty:
                answer = None
            if deadline.cancel.is_set():
                for each in undecided:
                    each.decide(_inconclusive(each.phase.verdict, "interrupted before it decided"))
                break
            if answer is not None:
                if answer.missing:
                    return answer.missing
                each = running[probe]
                each.ledger.record(answer.sent, answer.measurement)
                if each in undecided:
                    each.phase.verdict = judge_requests(
                        each.ledger.judge(),
                        probe.answered,
                        probe.errors,
                        probe.first_error,
                        request_criteria,
                    )
            for each in list(undecided):
                verdict = each.phase.verdict
                if each.probe.refused:
                    each.decide(dataclasses.replace(verdict, outcome="fail"))
                elif verdict.outcome != "inconclusive":
                    each.decide(verdict)
                elif each.out_of_traffic() and answers.empty():
                    each.decide(
                        _inconclusive(
                            verdict,
                            f"probe requests spent before the gate decided: {verdict.reason}",
                        )
                    )
                elif deadline.expired():
                    each.decide(
                        _inconclusive(
                            verdict,
                            f"{deadline.seconds:.3g} s spent before the gate decided: "
                            f"{verdict.reason}",
                        )
                    )
                else:
                    continue
                undecided.discard(each)
            failed = next((e for e in running.values() if e.phase.verdict.outcome == "fail"), None)
            if failed is not None:
                for each in undecided:
                    each.decide(
                        _inconclusive(each.phase.verdict, f"stopped: {failed.phase.label} failed")
                    )
                undecided.clear()
            tick(progress_lines(report.phases, criteria))
    finally:
        for each in running.values():
            each.probe.stop(cancel=True)
        for each in running.values():
            for worker in each.workers:
                worker.join(timeout=JOIN_SECONDS)
    for each in running.values():
        _finish(each.phase, each.probe, request_criteria)
    return ""


def _finish(phase: PhaseReport, probe: _Probe, request_criteria: RequestCriteria) -> None:
    """The phase's request counts, and its verdict with the requests' outcome applied."""
    phase.requests, phase.request_errors = probe.sent, probe.errors
    if phase.verdict.outcome != "fail":
        phase.verdict = judge_requests(
            phase.verdict,
            probe.answered,
            probe.errors,
            probe.first_error,
            request_criteria,
            final=True,
        )
    phase.prompt_tokens = probe.prompt_tokens
    if probe.refused:
        phase.refused = probe.refused
        phase.verdict = dataclasses.replace(phase.verdict, outcome="fail", reason=probe.refused)


def _run_phase(
    target: _Target,
    gate: Gate,
    judged_by: tuple[GateCriteria, RequestCriteria],
    bucket: ContextBucket,
    endpoint: Endpoint,
    deadline: Deadline,
    report: GateReport,
    tick: Tick,
) -> tuple[PhaseReport, bool]:
    """One phase: scrape, probe, scrape every interval until a verdict or a budget is spent.

    Acceptance is judged from the counters and the probe requests' own outcome on
    top (`judge_requests`): counters that move while requests fail do not pass.
    Returns the phase and whether later phases are worth running (not after a
    failure or when /metrics cannot be read).
    """
    criteria, request_criteria = judged_by
    transport, address, port = target.transport, target.address, target.port
    probe = _Probe.for_phase(target, gate, bucket, endpoint, deadline)
    phase = PhaseReport(bucket, endpoint, assess([], criteria))
    started = deadline.clock.now()
    workers = probe.workers(gate.probe.concurrency)
    go_on = True
    try:
        previous = _first_scrape(transport, address, port, report, deadline)
        for worker in workers:
            worker.start()
        no_series = consecutive_failures = 0
        while True:
            deadline.pause(gate.probe.scrape_interval)
            if probe.refused:
                break
            if deadline.cancel.is_set():
                phase.verdict = _inconclusive(phase.verdict, "interrupted before it decided")
                go_on = False
                break
            try:
                current = scrape(transport, address, port, deadline)
            except ScrapeFailed as exc:
                report.scrape_errors += 1
                consecutive_failures += 1
                if consecutive_failures >= CONSECUTIVE_SCRAPE_FAILURES or deadline.expired():
                    phase.verdict = _inconclusive(
                        phase.verdict,
                        f"could not measure: {consecutive_failures} scrapes failed in a row "
                        f"({exc})",
                    )
                    go_on = False
                    break
                continue
            consecutive_failures = 0
            if current is None:
                no_series += 1
                if (no_series >= NO_SERIES_SCRAPES and probe.sent) or deadline.expired():
                    phase.verdict = no_spec_decode_verdict()
                    break
                continue
            if previous is not None:
                try:
                    batch = measure(previous, current)
                    if batch.drafts:
                        phase.batches.append(batch)
                except CounterReset:
                    report.resets += 1
                    phase.batches.clear()
                except MetricsFormatError:
                    report.scrape_errors += 1  # read mid-update: start again from this scrape
            previous = current
            phase.verdict = judge_requests(
                assess(phase.batches, criteria),
                probe.answered,
                probe.errors,
                probe.first_error,
                request_criteria,
            )
            tick(progress_lines([*report.phases, phase], criteria))
            if phase.verdict.outcome != "inconclusive":
                break
            out_of_traffic = not any(w.is_alive() for w in workers)
            if out_of_traffic or deadline.expired():
                budget = "probe requests" if out_of_traffic else f"{deadline.seconds:.3g} s"
                phase.verdict = _inconclusive(
                    phase.verdict,
                    f"{budget} spent before the gate decided: {phase.verdict.reason}",
                )
                break
        phase.seconds = deadline.clock.now() - started  # decided; in-flight requests still run
    finally:
        probe.stop(cancel=deadline.cancel.is_set())  # an interrupted gate waits for nothing
        for worker in workers:
            if worker.is_alive():
                worker.join(timeout=deadline.limit(REQUEST_SECONDS))
    _finish(phase, probe, request_criteria)
    return phase, go_on and phase.verdict.outcome != "fail"


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


def _first_scrape(
    transport: Transport, address: str, port: int, report: GateReport, deadline: Deadline
) -> SpecDecodeCounters | None:
    try:
        return scrape(transport, address, port, deadline)
    except ScrapeFailed:
        report.scrape_errors += 1
        return None


def _inconclusive(last: Verdict, reason: str) -> Verdict:
    return dataclasses.replace(last, outcome="inconclusive", reason=reason)
