"""The gate's acceptance phases: probe traffic, figures, verdict.

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
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.deadline import Clock, Deadline
from orchestrator.gate.probe import REQUEST_SECONDS, Answer, Probe, Target
from orchestrator.gate.report import (
    PER_REQUEST,
    GateReport,
    PhaseReport,
    Tick,
    progress_lines,
)
from orchestrator.gate.scrape import ScrapeFailed, scrape
from orchestrator.metrics.assess import (
    GateCriteria,
    RequestCriteria,
    Verdict,
    assess,
    judge_requests,
    no_spec_decode_verdict,
)
from orchestrator.metrics.evaluate import CounterReset, measure
from orchestrator.metrics.requests import RequestLedger
from orchestrator.metrics.scrape import MetricsFormatError, SpecDecodeCounters
from orchestrator.playbook import Gate
from orchestrator.probes.context import ContextBucket
from orchestrator.probes.endpoints import Endpoint
from orchestrator.transport.base import Transport

JOIN_SECONDS = 5.0
"""How long a decided phase's workers get to notice their closed streams."""
CONSECUTIVE_SCRAPE_FAILURES = 4
NO_SERIES_SCRAPES = 3


@dataclass(eq=False)
class _Running:
    """A phase probing beside the others: its report, its requests, its ledger."""

    phase: PhaseReport
    probe: Probe
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


def run_at_once(
    target: Target,
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
    answers: queue.Queue[tuple[Probe, Answer]] = queue.Queue()
    running: dict[Probe, _Running] = {}
    for bucket, endpoint in phases:
        probe = Probe.for_phase(target, gate, bucket, endpoint, deadline, answers)
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
                    each.decide(inconclusive(each.phase.verdict, "interrupted before it decided"))
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
                        inconclusive(
                            verdict,
                            f"probe requests spent before the gate decided: {verdict.reason}",
                        )
                    )
                elif deadline.expired():
                    each.decide(
                        inconclusive(
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
                        inconclusive(each.phase.verdict, f"stopped: {failed.phase.label} failed")
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


def _finish(phase: PhaseReport, probe: Probe, request_criteria: RequestCriteria) -> None:
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


def run_phase(
    target: Target,
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
    probe = Probe.for_phase(target, gate, bucket, endpoint, deadline)
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
                phase.verdict = inconclusive(phase.verdict, "interrupted before it decided")
                go_on = False
                break
            try:
                current = scrape(transport, address, port, deadline)
            except ScrapeFailed as exc:
                report.scrape_errors += 1
                consecutive_failures += 1
                if consecutive_failures >= CONSECUTIVE_SCRAPE_FAILURES or deadline.expired():
                    phase.verdict = inconclusive(
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
                phase.verdict = inconclusive(
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


def _first_scrape(
    transport: Transport, address: str, port: int, report: GateReport, deadline: Deadline
) -> SpecDecodeCounters | None:
    try:
        return scrape(transport, address, port, deadline)
    except ScrapeFailed:
        report.scrape_errors += 1
        return None


def inconclusive(last: Verdict, reason: str) -> Verdict:
    return dataclasses.replace(last, outcome="inconclusive", reason=reason)
