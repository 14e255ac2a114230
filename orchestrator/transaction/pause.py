"""A deploy's gate paused for a decision (`gate.on_inconclusive: pause`): the new
release goes on serving, the run keeps its lock and heartbeat, and its journal says
`paused` (a run killed now is undone by the next one, as one killed in its gate). It
polls for `orch promote|abort|retry` until one comes, the pause times out, or a stop
request or a lost lock ends it (both as an abort)."""

from __future__ import annotations

import contextlib
import dataclasses

from orchestrator.container import pause
from orchestrator.container.lock import RENEWALS_PER_LEASE
from orchestrator.container.pause import PAUSED, Decision
from orchestrator.deadline import now
from orchestrator.errors import OrchError
from orchestrator.gate import GateReport
from orchestrator.playbook import command_name
from orchestrator.transaction.decision import Judged, PausePoll, pause_ends, pauses
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.settle import unsettled

POLL_SECONDS = 5.0
"""The longest a decision waits to be seen (a shorter lease renews, and polls, faster)."""


def decided(d: Deployment, release_id: str, report: GateReport) -> tuple[GateReport, bool]:
    """The gate report `release_id` is judged by, and whether a person promoted it:
    the switch's report when it does not pause; else, after each pause, the report
    again (promote, abort: its reason says how the pause ended) or a new gate's (retry,
    which may pause again)."""
    on_inconclusive = d.playbook.gate.on_inconclusive
    while pauses(Judged.of(report), on_inconclusive, d.cancel.requested):
        decision = wait(d, release_id, report)
        d.outcome.decisions = [*(d.outcome.decisions or []), decision]
        if decision.choice == "promote":
            settle(d, release_id, report)
            return report, True
        if decision.choice == "abort":
            ended = f"{report.verdict.reason}; paused, then aborted by {decision.by}"
            report.verdict = dataclasses.replace(report.verdict, reason=ended)
            return report, False
        report = regate(d, release_id)
    return report, False


def wait(d: Deployment, release_id: str, report: GateReport) -> Decision:
    """Paused: say so and how to decide, then poll at the heartbeat (at most every
    POLL_SECONDS) until the pause ends (decision.pause_ends)."""
    gate = d.playbook.gate
    choices = pause.commands(command_name(d.playbook), d.options.inventory, d.name)
    waiting = "\n".join(
        [
            f"paused: gate inconclusive ({report.verdict.reason}); {release_id} serving, "
            f"waiting up to {gate.pause_timeout:g} s for a decision:",
            *(f"  {choice}: {command}" for choice, command in choices.items()),
        ]
    )
    d.outcome.notes.append(waiting)
    interval = min(POLL_SECONDS, d.lock.lease / RENEWALS_PER_LEASE)
    with d.step(PAUSED):
        d.note(waiting)
        with contextlib.suppress(OrchError):  # a stale decision is never this run's anyway
            pause.clear(d.transport, d.layout)
        started, said = d.clock.now(), None
        while True:
            found = _read(d)
            if isinstance(found, str) and found != said:
                d.note(said := found)
            ended = pause_ends(
                PausePoll(
                    d.options.run_id,
                    found,
                    d.clock.now() - started,
                    gate.pause_timeout,
                    d.cancel.requested,
                    d.lock_lost(),
                    now(),
                )
            )
            if ended is not None:
                break
            d.clock.sleep(interval, d.cancel.event)
    with contextlib.suppress(OrchError):  # acted on once: the next pause starts clean
        pause.clear(d.transport, d.layout)
    line = f"pause ended: {ended.describe()}"
    d.outcome.notes.append(line)
    d.note(line)
    return ended


def regate(d: Deployment, release_id: str) -> GateReport:
    """`orch retry`: the running server gated again, as the switch gates it (a pass
    watched through its settle)."""
    key = d.probe_key(release_id)
    report = d.gate(d.gate_target(release_id), "gate (retry)", release_id, d.cancel.event, key)
    if d.admits(report) and not d.cancel.requested:
        settle(d, release_id, report)
    return report


def settle(d: Deployment, release_id: str, report: GateReport) -> None:
    """A release about to be kept after a pause, watched through its settle as the
    switch watches a pass: a server that died meanwhile fails it (and is rolled back)."""
    target = d.gate_target(release_id)
    server = d.server(target.port)
    with d.step("settle"):
        state = server.state()
        died = (
            unsettled(server, state.pid, target, d.probe_key(release_id), d.clock)
            if state.running and state.pid
            else f"the server is {state.status} after its pause"
        )
    if died:
        report.verdict = dataclasses.replace(report.verdict, outcome="fail", reason=died)


def _read(d: Deployment) -> Decision | str | None:
    """The decision file; a container that cannot be read just now is read at the next poll."""
    try:
        return pause.read(d.transport, d.layout)
    except OrchError:
        return None
