"""The acceptance gate on a live server: probe traffic, scrapes, verdict.

Every probe request carries the playbook's sampling (greedy by default), and the
report records it: acceptance depends on it as much as on the drafter.
The gate runs in phases, one per context bucket and endpoint (short prompts,
then long ones past the drafter's sliding window; plain completions, then chat
as production calls it). In each phase probe requests run on worker threads
over the SSH connection while the main thread scrapes /metrics every
interval; each interval's counter deltas are one batch for `metrics.assess`,
which ends the phase as soon as it decides.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import tenacity

from orchestrator.deadline import Deadline
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

SCRAPE_ATTEMPTS = 3
SCRAPE_SECONDS = 15.0
REQUEST_SECONDS = 60.0
CONSECUTIVE_SCRAPE_FAILURES = 4
NO_SERIES_SCRAPES = 3


class ScrapeFailed(Exception):
    """/metrics could not be read or parsed: could not measure, not measured bad."""


@dataclass
class PhaseReport:
    """One context bucket on one endpoint, measured from its own counter deltas.

    `seconds` runs from the phase's first scrape to its verdict; the requests
    still in flight then are waited for before the next phase starts.
    """

    bucket: ContextBucket
    endpoint: Endpoint
    verdict: Verdict
    requests: int = 0
    request_errors: int = 0
    prompt_tokens: tuple[int, int] | None = None
    seconds: float = 0.0
    batches: list[Measurement] = field(default_factory=list)
    refused: str | None = None
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

    def to_dict(self) -> dict[str, object]:
        verdict = self.verdict
        return {
            "context": self.bucket.name,
            "min_tokens": self.bucket.min_tokens,
            "max_tokens": self.bucket.max_tokens,
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
            "note": "; ".join(filter(None, [self.bucket.note, self.outside_bucket()])),
            "requests": self.requests,
            "request_errors": self.request_errors,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class GateReport:
    """The gate's outcome over its phases.

    The top-level figures are the deciding phase's when one failed or stayed
    undecided; when every phase passed they are all phases' drafts together,
    with the weakest phase's bounds.
    """

    verdict: Verdict
    requests: int = 0
    request_errors: int = 0
    scrape_errors: int = 0
    resets: int = 0
    explanation: str | None = None
    seconds: float = 0.0
    phases: list[PhaseReport] = field(default_factory=list)
    advice: Advice | None = None
    criteria: GateCriteria | None = None
    sampling: dict[str, Any] | None = None
    """The sampling fields every probe request carried: the figures hold under it (None:
    no probe was sent, the server never became ready)."""

    def to_dict(self) -> dict[str, object]:
        return {
            **self.verdict.to_dict(),
            "criteria": dataclasses.asdict(self.criteria) if self.criteria else None,
            "sampling": self.sampling,
            "explanation": self.explanation,
            "requests": self.requests,
            "request_errors": self.request_errors,
            "scrape_errors": self.scrape_errors,
            "counter_resets": self.resets,
            "seconds": round(self.seconds, 3),
            "by_context": [phase.to_dict() for phase in self.phases],
            "advice": self.advice.to_dict() if self.advice else None,
        }


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


class _Probe:
    """Bounded-concurrency requests on one endpoint until stopped or out of budget."""

    def __init__(
        self,
        target: _Target,
        endpoint: Endpoint,
        prompts: Sequence[str],
        max_tokens: int,
        max_requests: int,
        deadline: Deadline,
        sampling: dict[str, Any],
    ) -> None:
        self.target, self.endpoint, self.max_tokens = target, endpoint, max_tokens
        self.sampling = sampling
        self.deadline = deadline
        self._prompts = itertools.cycle(prompts)
        self._budget = max_requests
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.sent = self.answered = self.errors = 0
        self.first_error = ""
        self.prompt_tokens: tuple[int, int] | None = None
        self.refused: str | None = None
        """Why the server refused a probe request (HTTP 401), if it did."""

    def _next_prompt(self) -> str | None:
        with self._lock:
            if self._budget <= 0 or self.stop.is_set():
                return None
            self._budget -= 1
            self.sent += 1
            return next(self._prompts)

    def worker(self) -> None:
        while (prompt := self._next_prompt()) is not None:
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
                )
            except OrchError as exc:
                response, problem = None, str(exc)
            if response is not None and response.status == 200:
                self._count_prompt_tokens(response)
                with self._lock:
                    self.answered += 1
                continue
            if response is not None:
                problem = f"HTTP {response.status} from {self.endpoint.path}"
                if response.status == 401:
                    self.refused = refused_reason(target.key, response.body)
                    self.stop.set()
            with self._lock:
                self.errors += 1
                self.first_error = self.first_error or problem[:200]
            self.deadline.pause(0.2)

    def _count_prompt_tokens(self, response: http.HttpResponse) -> None:
        """The prompt lengths the server counted (its `usage`), for the report."""
        try:
            tokens = response.json()["usage"]["prompt_tokens"]
        except (ValueError, KeyError, TypeError):
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
) -> GateReport:
    """Probe every context bucket on every endpoint, one phase each, within the budgets.

    A phase starts from its own scrape after the previous phase's requests have
    finished, so its counter deltas are its own. Each phase gets an equal share
    of what is left of `time_budget` (a quick phase leaves more to the later
    ones) and sends at most `probe.max_requests`. The first failed phase
    decides the gate; every phase must pass for the gate to pass. A set `stop` ends
    the gate inconclusive: a gate that was interrupted did not pass. Probe requests
    carry `key`; a 401 fails the gate saying so, with no word on acceptance.
    """
    stop = stop or threading.Event()
    criteria = GateCriteria(
        gate.min_mean_acceptance_length,
        gate.min_position1_acceptance,
        gate.min_drafts,
        gate.confidence,
    )
    requests = RequestCriteria(gate.min_probe_responses, gate.max_probe_error_share)
    endpoints = probe_endpoints(gate.probe.endpoints, gate.probe.chat_template_kwargs)
    phases = [(bucket, endpoint) for bucket in buckets for endpoint in endpoints]
    report = GateReport(
        assess([], criteria), sampling=request_fields(gate.probe.sampling), criteria=criteria
    )
    started = time.monotonic()
    target = _Target(transport, address, port, served_name, key)
    for index, (bucket, endpoint) in enumerate(phases):
        left = len(phases) - index
        seconds = (gate.time_budget - (time.monotonic() - started)) / left
        deadline = Deadline.after(max(0.0, seconds), stop)
        phase, go_on = _run_phase(
            target, gate, (criteria, requests), bucket, endpoint, deadline, report
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
    report.seconds = time.monotonic() - started
    return report


def _run_phase(
    target: _Target,
    gate: Gate,
    judged_by: tuple[GateCriteria, RequestCriteria],
    bucket: ContextBucket,
    endpoint: Endpoint,
    deadline: Deadline,
    report: GateReport,
) -> tuple[PhaseReport, bool]:
    """One phase: scrape, probe, scrape every interval until a verdict or a budget is spent.

    Acceptance is judged from the counters and the probe requests' own outcome on
    top (`judge_requests`): counters that move while requests fail do not pass.
    Returns the phase and whether later phases are worth running (not after a
    failure or when /metrics cannot be read).
    """
    criteria, request_criteria = judged_by
    transport, address, port = target.transport, target.address, target.port
    probe = _Probe(
        target,
        endpoint,
        bucket.prompts,
        gate.probe.max_tokens,
        gate.probe.max_requests,
        deadline,
        request_fields(gate.probe.sampling),
    )
    phase = PhaseReport(bucket, endpoint, assess([], criteria))
    started = time.monotonic()
    workers = [
        threading.Thread(target=probe.worker, daemon=True) for _ in range(gate.probe.concurrency)
    ]
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
        phase.seconds = time.monotonic() - started  # decided; in-flight requests still run
    finally:
        probe.stop.set()
        for worker in workers:
            if worker.is_alive():
                worker.join(timeout=deadline.limit(REQUEST_SECONDS))
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
