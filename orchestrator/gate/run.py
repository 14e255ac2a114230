"""The gate on a live server: the acceptance phases, then the speed levels."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

from orchestrator.deadline import SYSTEM_CLOCK, Clock, Deadline
from orchestrator.gate.acceptance import run_at_once, run_phase
from orchestrator.gate.probe import Target
from orchestrator.gate.report import (
    COUNTERS,
    PER_REQUEST,
    GateReport,
    SpeedReport,
    Tick,
    explain_phases,
    overall_verdict,
    progress_lines,
    source_note,
)
from orchestrator.gate.speed import SpeedTraffic, criteria_of, judge_speed, measure_speed
from orchestrator.metrics.advice import speculative_tokens_advice
from orchestrator.metrics.assess import FailureCauses, GateCriteria, RequestCriteria, assess
from orchestrator.metrics.speedup import SpeedReference, combined_outcome
from orchestrator.playbook import Gate
from orchestrator.probes.context import ContextBucket
from orchestrator.probes.endpoints import probe_endpoints
from orchestrator.probes.sampling import request_fields
from orchestrator.secrets import ProbeKey
from orchestrator.transport.base import Transport


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
    reference: SpeedReference | None = None,
) -> GateReport:
    """Probe every context bucket on every endpoint, one phase each, within the budgets.

    Each phase sends at most `probe.max_requests`, `probe.concurrency` at a time.
    The first failed phase decides the gate; every phase must pass for the gate
    to pass. A set `stop` ends the gate inconclusive: a gate that was interrupted
    did not pass. Probe requests carry `key`; a 401 fails the gate saying so,
    with no word on acceptance. See `acceptance` for the two sources.

    Then, once acceptance passed (a gate that will not pass needs no speed figure,
    and keeps its time budget), unless stopped, the speed levels
    (`gate.speed`, `speed.measure_speed`), judged against `reference` (a baseline,
    or the replaced release's recorded figures; None: recorded, not judged). A
    speed failure fails the gate, naming the level; acceptance stays the diagnosis.
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
    asked = gate.acceptance_source
    report = GateReport(
        assess([], criteria),
        sampling=request_fields(gate.probe.sampling),
        criteria=criteria,
        source=COUNTERS if asked == COUNTERS else PER_REQUEST,
        note=source_note(asked),
    )
    started = clock.now()
    target = Target(transport, address, port, served_name, key)
    if report.source == PER_REQUEST:
        deadline = Deadline.after(gate.time_budget, stop, clock)
        missing = run_at_once(target, gate, judged_by, phases, deadline, report, tick)
        if missing:
            report.phases.clear()
            report.source = COUNTERS
            report.note = source_note(asked, missing)
    if report.source == COUNTERS:
        for index, (bucket, endpoint) in enumerate(phases):
            left = len(phases) - index
            seconds = (gate.time_budget - (clock.now() - started)) / left
            deadline = Deadline.after(max(0.0, seconds), stop, clock)
            phase, go_on = run_phase(
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
    if gate.speed.enabled and report.verdict.outcome == "pass" and not stop.is_set():
        accepted = progress_lines(report.phases, criteria)

        def speed_tick(line: str) -> None:
            """The acceptance phases' last figures stay shown above the speed level's."""
            tick(f"{accepted}\n{line}")

        report.speed = _speed(target, gate, buckets, stop, speed_tick, reference, clock)
        outcome = combined_outcome(report.verdict.outcome, report.speed.verdict)
        speed_reason = report.speed.reason
        if stop.is_set():  # an interrupted gate did not pass
            outcome, speed_reason = "inconclusive", "interrupted during the speed levels"
        if outcome != report.verdict.outcome:
            report.verdict = dataclasses.replace(
                report.verdict,
                outcome=outcome,
                reason=f"speed: {speed_reason}; acceptance: {report.verdict.reason}",
            )
    report.seconds = clock.now() - started
    return report


def _speed(
    target: Target,
    gate: Gate,
    buckets: Sequence[ContextBucket],
    stop: threading.Event,
    tick: Tick,
    reference: SpeedReference | None,
    clock: Clock,
) -> SpeedReport:
    """The speed levels, judged against the reference when there is one."""
    speed = measure_levels(target, gate, buckets, stop, tick, clock)
    judge_speed(speed, reference, criteria_of(gate.speed))
    return speed


def measure_levels(
    target: Target,
    gate: Gate,
    buckets: Sequence[ContextBucket],
    stop: threading.Event | None,
    tick: Tick,
    clock: Clock = SYSTEM_CLOCK,
) -> SpeedReport:
    """The speed levels on the short prompts, within their own `time_budget`, unjudged:
    a gate's, and a baseline's (the same server without speculation)."""
    traffic = SpeedTraffic(
        buckets[0].prompts, gate.speed.max_tokens, request_fields(gate.probe.sampling)
    )
    deadline = Deadline.after(gate.time_budget, stop, clock)
    return measure_speed(target, gate.speed, traffic, gate.confidence, deadline, tick)
