"""The acceptance gate on a live server: probe traffic, scrapes, verdict.

Probe requests run on worker threads over the SSH connection while the main
thread scrapes /metrics every interval; each interval's counter deltas are one
batch for `metrics.assess`, which stops the gate as soon as it decides.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from dataclasses import dataclass, field

import tenacity

from orchestrator.errors import OrchError
from orchestrator.metrics.assess import (
    FailureCauses,
    GateCriteria,
    Verdict,
    assess,
    explain,
    no_spec_decode_verdict,
)
from orchestrator.metrics.evaluate import CounterReset, Measurement, measure
from orchestrator.metrics.scrape import (
    ACCEPT,
    MetricsFormatError,
    SpecDecodeCounters,
    parse_spec_decode,
)
from orchestrator.playbook import Gate
from orchestrator.transport import http
from orchestrator.transport.base import Transport

SCRAPE_ATTEMPTS = 3
CONSECUTIVE_SCRAPE_FAILURES = 4
NO_SERIES_SCRAPES = 3


class ScrapeFailed(Exception):
    """/metrics could not be read or parsed: could not measure, not measured bad."""


@dataclass
class GateReport:
    verdict: Verdict
    requests: int = 0
    request_errors: int = 0
    scrape_errors: int = 0
    resets: int = 0
    explanation: str | None = None
    seconds: float = 0.0
    batches: list[Measurement] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            **self.verdict.to_dict(),
            "explanation": self.explanation,
            "requests": self.requests,
            "request_errors": self.request_errors,
            "scrape_errors": self.scrape_errors,
            "counter_resets": self.resets,
            "seconds": round(self.seconds, 3),
        }


class _Probe:
    """Bounded-concurrency completion requests until stopped or out of budget."""

    def __init__(
        self,
        transport: Transport,
        address: str,
        port: int,
        model: str,
        prompts: list[str],
        max_tokens: int,
        max_requests: int,
    ) -> None:
        self.transport, self.address, self.port = transport, address, port
        self.model, self.max_tokens = model, max_tokens
        self._prompts = itertools.cycle(prompts)
        self._budget = max_requests
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.sent = self.errors = 0

    def _next_prompt(self) -> str | None:
        with self._lock:
            if self._budget <= 0 or self.stop.is_set():
                return None
            self._budget -= 1
            self.sent += 1
            return next(self._prompts)

    def worker(self) -> None:
        while (prompt := self._next_prompt()) is not None:
            payload = {"model": self.model, "prompt": prompt, "max_tokens": self.max_tokens}
            try:
                response = http.request(
                    self.transport,
                    self.address,
                    self.port,
                    "POST",
                    "/v1/completions",
                    payload,
                    timeout=60,
                )
                ok = response.status == 200
            except OrchError:
                ok = False
            if not ok:
                with self._lock:
                    self.errors += 1
                time.sleep(0.2)


def scrape(transport: Transport, address: str, port: int) -> SpecDecodeCounters | None:
    """One /metrics read, retried on transport errors; garbage is a ScrapeFailed."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(OrchError),
        wait=tenacity.wait_exponential(multiplier=0.1, max=1.0),
        stop=tenacity.stop_after_attempt(SCRAPE_ATTEMPTS),
        reraise=True,
    )
    try:
        response = retrying(
            http.request,
            transport,
            address,
            port,
            "GET",
            "/metrics",
            timeout=15,
            headers={"Accept": ACCEPT},
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
    prompts: list[str],
    causes: FailureCauses,
) -> GateReport:
    criteria = GateCriteria(
        gate.min_mean_acceptance_length,
        gate.min_position1_acceptance,
        gate.min_drafts,
        gate.confidence,
    )
    probe = _Probe(
        transport,
        address,
        port,
        served_name,
        prompts,
        gate.probe.max_tokens,
        gate.probe.max_requests,
    )
    report = GateReport(assess([], criteria))
    started = time.monotonic()
    workers = [
        threading.Thread(target=probe.worker, daemon=True) for _ in range(gate.probe.concurrency)
    ]
    try:
        previous = _first_scrape(transport, address, port, report)
        for worker in workers:
            worker.start()
        no_series = consecutive_failures = 0
        while True:
            time.sleep(gate.probe.scrape_interval)
            try:
                current = scrape(transport, address, port)
            except ScrapeFailed as exc:
                report.scrape_errors += 1
                consecutive_failures += 1
                if consecutive_failures >= CONSECUTIVE_SCRAPE_FAILURES:
                    report.verdict = _inconclusive(
                        report.verdict,
                        f"could not measure: {consecutive_failures} scrapes failed in a row "
                        f"({exc})",
                    )
                    break
                continue
            consecutive_failures = 0
            if current is None:
                no_series += 1
                if no_series >= NO_SERIES_SCRAPES and probe.sent:
                    report.verdict = no_spec_decode_verdict()
                    break
                continue
            if previous is not None:
                try:
                    batch = measure(previous, current)
                    if batch.drafts:
                        report.batches.append(batch)
                except CounterReset:
                    report.resets += 1
                    report.batches.clear()
                except MetricsFormatError:
                    report.scrape_errors += 1  # read mid-update: start again from this scrape
            previous = current
            report.verdict = assess(report.batches, criteria)
            if report.verdict.outcome != "inconclusive":
                break
            out_of_traffic = not any(w.is_alive() for w in workers)
            if out_of_traffic or time.monotonic() - started > gate.time_budget:
                budget = "probe requests" if out_of_traffic else f"{gate.time_budget:g} s"
                report.verdict = _inconclusive(
                    report.verdict,
                    f"{budget} spent before the gate decided: {report.verdict.reason}",
                )
                break
    finally:
        probe.stop.set()
        for worker in workers:
            if worker.is_alive():
                worker.join(timeout=70)
    report.requests, report.request_errors = probe.sent, probe.errors
    report.explanation = explain(report.verdict, causes)
    report.seconds = time.monotonic() - started
    return report


def _first_scrape(
    transport: Transport, address: str, port: int, report: GateReport
) -> SpecDecodeCounters | None:
    try:
        return scrape(transport, address, port)
    except ScrapeFailed:
        report.scrape_errors += 1
        return None


def _inconclusive(last: Verdict, reason: str) -> Verdict:
    return dataclasses.replace(last, outcome="inconclusive", reason=reason)
