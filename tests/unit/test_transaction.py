"""The transaction and the gate on an in-memory container: fast, no processes.

`Container` is a scripted container (tests/scripted.py): the deployment in memory,
answering each container command by concern; its vLLM answers /health, /metrics
(counters that grow with every scrape) and completions.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from clocks import FakeClock
from scripted import ScriptedGate, metrics, serving
from transactions import BUCKETS, CAUSES, FAST_GATE, Container, DiskFillsAt, setup, target_run

from orchestrator.cancel import Cancel
from orchestrator.container.gpu import wait_free
from orchestrator.container.lock import Owner
from orchestrator.gate import GateReport, run_gate
from orchestrator.plan import TargetPlan
from orchestrator.playbook import Gate, Playbook, Probe
from orchestrator.transaction.actions import ServerActionRun
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.options import Options
from orchestrator.transport.base import Result
from orchestrator.transport.memory import MemoryTransport

ONE_SCRAPE_A_SECOND = Gate(
    min_drafts=50,
    probe=Probe(scrape_interval=1.0, concurrency=1, max_tokens=8, endpoints=["completions"]),
)
"""A gate for a fake clock: its whole budget in a hundred-odd looks."""
REQUEST_SECONDS = 1.0
"""How long a probe request takes on the fake clock where the tests give it traffic."""
STOPPED_GATE_SECONDS = ONE_SCRAPE_A_SECOND.probe.scrape_interval + REQUEST_SECONDS
"""A stopped gate returns within a poll interval plus the work of one safe step (the probe
request in flight), by the fake clock: never its budget (`time_budget`, 120 s)."""


# -- the gate ------------------------------------------------------------------------------------


def test_gate_passes_on_counters_that_grow_well() -> None:
    transport = MemoryTransport()
    serving(transport, "m")
    report = run_gate(
        transport, "10.0.0.5", 8000, "m", FAST_GATE, BUCKETS, CAUSES, clock=FakeClock()
    )
    assert report.verdict.outcome == "pass", report.verdict.reason
    assert report.verdict.mean_acceptance_length == pytest.approx(4.0)
    assert ("GET", "/metrics") in transport.requests


def test_a_gate_whose_requests_all_fail_fails_though_its_counters_pass() -> None:
    transport = MemoryTransport()
    serving(transport, "someone-else")  # every completion is a 404; the counters still grow
    report = run_gate(
        transport, "10.0.0.5", 8000, "m", FAST_GATE, BUCKETS, CAUSES, clock=FakeClock()
    )
    assert report.verdict.outcome == "fail", report.verdict.reason
    assert report.request_errors == report.requests > 0
    assert "probe requests failed" in report.verdict.reason
    assert "first: HTTP 404 from /v1/completions" in report.verdict.reason


def test_gate_on_garbage_metrics_could_not_measure() -> None:
    transport = MemoryTransport()
    serving(transport, "m")
    transport.on_http("GET", "/metrics", lambda _: (200, b"<html>nope</html>"))
    report = run_gate(
        transport, "10.0.0.5", 8000, "m", FAST_GATE, BUCKETS, CAUSES, clock=FakeClock()
    )
    assert report.verdict.outcome == "inconclusive"
    assert "could not measure" in report.verdict.reason


def test_a_stop_request_ends_the_gate_undecided() -> None:
    transport = MemoryTransport()
    serving(transport, "m")
    transport.on_http("GET", "/metrics", lambda _: (200, metrics(1)))  # never moves
    stop, clock = threading.Event(), FakeClock()
    stopped: list[float] = []
    clock.after(1.0, lambda: (stopped.append(clock.now()), stop.set()))
    report = run_gate(
        transport, "10.0.0.5", 8000, "m", ONE_SCRAPE_A_SECOND, BUCKETS, CAUSES, stop, clock=clock
    )
    assert report.verdict.outcome == "inconclusive"
    assert "interrupted" in report.verdict.reason
    assert clock.now() - stopped[0] <= STOPPED_GATE_SECONDS


def test_rollback_regates_the_old_release_with_its_own_served_name() -> None:
    playbook, plan, container = setup(served_name="new-name")
    container.gated_release("aaaaaaaaaaaa", "old-name")
    container.gated_release("bbbbbbbbbbbb", "new-name")
    container.links[container.layout.current] = "releases/bbbbbbbbbbbb"
    container.links[container.layout.previous] = "releases/aaaaaaaaaaaa"
    asked = serving(container.transport, "old-name")

    outcome = target_run(playbook, plan, container, clock=FakeClock()).rollback(None)

    assert outcome.result == "rolled_back", outcome.error
    assert set(asked) == {"old-name"}
    assert container.links[container.layout.current] == "releases/aaaaaaaaaaaa"
    assert container.links[container.layout.previous] == "releases/bbbbbbbbbbbb"
    assert container.journal_steps == [
        "begin",
        "stop server",
        "switch current",
        "start server",
        "wait ready",
        "gate",
        "settle",
        "gate passed",
    ]
    assert container.events == [
        "lock",
        "start releases/aaaaaaaaaaaa",
        "audit rollback",
        "journal cleared",
        "unlock",
    ]
    assert container.layout.journal not in container.files


def test_a_stop_request_during_the_gate_goes_back_to_the_previous_release() -> None:
    playbook, plan, container = setup(served_name="old-name")
    container.gated_release("aaaaaaaaaaaa", "old-name", ONE_SCRAPE_A_SECOND)
    container.gated_release("bbbbbbbbbbbb", "old-name", ONE_SCRAPE_A_SECOND)
    container.links[container.layout.current] = "releases/aaaaaaaaaaaa"
    cancel, clock = Cancel(), FakeClock()
    serving(container.transport, "old-name", request_seconds=REQUEST_SECONDS, clock=clock)
    container.transport.on_http("GET", "/metrics", lambda _: (200, metrics(1)))  # undecided
    stopped: list[float] = []
    clock.after(1.0, lambda: (stopped.append(clock.now()), cancel.request(15)))
    returned: list[float] = []

    def timed_gate(*args: Any, **kwargs: Any) -> GateReport:
        try:
            return run_gate(*args, **kwargs)
        finally:
            returned.append(clock.now())

    run = target_run(playbook, plan, container, cancel, clock, timed_gate)
    outcome = run.rollback("bbbbbbbbbbbb")

    assert (outcome.result, outcome.exit_code, outcome.current) == (
        "interrupted",
        143,
        "aaaaaaaaaaaa",
    )
    assert container.links[container.layout.current] == "releases/aaaaaaaaaaaa"
    assert "rollback gate" in container.journal_steps
    assert container.events[-3:] == ["audit rollback", "journal cleared", "unlock"]
    assert clock.slept >= ONE_SCRAPE_A_SECOND.time_budget  # the undo gated to its budget
    # The interrupted gate (the first; the undo's is never cut short) returned at once.
    assert returned[0] - stopped[0] <= STOPPED_GATE_SECONDS, returned


def test_a_live_owner_on_another_host_is_refused_with_its_name() -> None:
    playbook, plan, container = setup()
    alive = Owner("run-alive", "alice", "elsewhere", 1, time.time())
    container.files[container.layout.lock_owner] = alive.to_json().encode()

    outcome = target_run(playbook, plan, container, clock=FakeClock()).rollback("aaaaaaaaaaaa")

    assert outcome.exit_code == 3
    assert "deploy lock held" in (outcome.error or "") and "alice" in (outcome.error or "")
    assert container.files[container.layout.lock_owner] == alive.to_json().encode()


def test_an_expired_lease_is_taken_over() -> None:
    playbook, plan, container = setup()
    playbook = playbook.model_copy(update={"lock_lease": 60.0})
    old = Owner("run-old", "alice", "elsewhere", 1, time.time(), lease=60.0)
    assert "heartbeat stopped 3600 s ago" in (old.gone(3600) or "")
    assert old.gone(59) is None  # a renewed heartbeat keeps a live owner's lock
    container.files[container.layout.lock_owner] = old.to_json().encode()
    container.heartbeat_age = 3600

    outcome = target_run(playbook, plan, container, clock=FakeClock()).rollback(None)

    assert "no previous release" in (outcome.error or "")
    assert container.events == ["take over", "unlock"]


def test_the_wait_for_gpu_memory_says_what_each_short_gpu_has_free() -> None:
    looks = iter(
        [b"0, GPU-a, 49140, 48000, 1140, NVIDIA L4\n", b"0, GPU-a, 49140, 100, 49040, NVIDIA L4\n"]
    )
    transport = MemoryTransport().on(
        "gpu_query", lambda argv, _stdin: Result(tuple(argv), 0, next(looks), b"")
    )
    heard: list[str] = []
    clock = FakeClock()
    wait_free(transport, "nvidia-smi", 1, 0.9, timeout=30, tick=heard.append, clock=clock)
    assert heard == ["GPU 0: 1140 of 49140 MiB free"]  # the second look found it free
    assert clock.slept == 0.5  # one pause between the two looks


# -- stop, start, remove -------------------------------------------------------------------------


def server_run(playbook: Playbook, plan: TargetPlan, container: Container) -> ServerActionRun:
    options = Options(run_id="run-now", user="ops")
    return ServerActionRun(
        Deployment(
            plan, container.transport, playbook, BUCKETS, "nvidia-smi", options, clock=FakeClock()
        )
    )


def test_stop_then_start_keep_the_release_and_gate_it_again() -> None:
    playbook, plan, container = setup(served_name="m")
    container.gated_release("aaaaaaaaaaaa", "m")
    container.links[container.layout.current] = "releases/aaaaaaaaaaaa"
    serving(container.transport, "m")

    stopped = server_run(playbook, plan, container).act("stop")

    assert (stopped.result, stopped.current, stopped.error) == ("stopped", "aaaaaaaaaaaa", None)
    assert container.server is None
    assert container.journal_steps == ["begin", "stop server"]

    started = server_run(playbook, plan, container).act("start")

    assert started.result == "started", started.error
    assert started.gate is not None and started.gate.verdict.outcome == "pass"
    assert container.links[container.layout.current] == "releases/aaaaaaaaaaaa"
    assert container.events[-4:] == [
        "start releases/aaaaaaaaaaaa",
        "audit start",
        "journal cleared",
        "unlock",
    ]
    audit = [json.loads(line) for line in container.files[container.layout.audit_log].splitlines()]
    assert [(a["action"], a["result"]) for a in audit] == [
        ("stop", "stopped"),
        ("start", "started"),
    ]
    assert audit[-1]["current_gate"]["verdict"] == "pass"  # the gate that admitted it again


def test_remove_stops_the_server_and_deletes_all_but_the_audit_log() -> None:
    playbook, plan, container = setup()
    container.gated_release("aaaaaaaaaaaa", "m")
    container.links[container.layout.current] = "releases/aaaaaaaaaaaa"

    removed = server_run(playbook, plan, container).act("remove")

    assert (removed.result, removed.current) == ("removed", None)
    assert container.server is None and container.links == {}
    assert list(container.files) == [container.layout.audit_log]
    assert (
        "remove current previous server.pid server.log server.log.old server-check.json releases"
        in (container.events)
    )


def test_a_stop_cut_short_is_finished_by_the_next_run() -> None:
    playbook, plan, container = setup(served_name="m")
    container.gated_release("aaaaaaaaaaaa", "m")
    container.links[container.layout.current] = "releases/aaaaaaaaaaaa"
    dead = {"run_id": "r-dead", "action": "stop", "owner": "ops", "from_release": "aaaaaaaaaaaa"}
    journal = {**dead, "to_release": "aaaaaaaaaaaa", "step": "stop server", "started": "t"}
    container.files[container.layout.journal] = json.dumps({**journal, "updated": "t"}).encode()

    outcome = server_run(playbook, plan, container).act("stop")

    assert outcome.recovered is not None and outcome.recovered.back_on == "aaaaaaaaaaaa"
    assert "finished its stop" in outcome.notes[0]
    assert container.server is None and outcome.result == "unchanged"
    audit = [json.loads(line) for line in container.files[container.layout.audit_log].splitlines()]
    assert [(a["action"], a["result"]) for a in audit] == [
        ("recover", "stopped"),
        ("stop", "unchanged"),
    ]


def test_a_disk_that_fills_during_the_switch_ends_on_the_previous_release() -> None:
    """Issue 35 cause 4: every step wrote the journal first, the way back's too, so once
    the old server was stopped a full disk failed the rollback at once: no server. The
    way back now goes on without its journal, and says so."""
    playbook, plan, container = setup(served_name="old-name")
    container.gated_release("aaaaaaaaaaaa", "old-name")
    container.gated_release("bbbbbbbbbbbb", "old-name")
    container.links[container.layout.current] = "releases/aaaaaaaaaaaa"
    serving(container.transport, "old-name")
    disk = DiskFillsAt(container, "switch current")
    gate = ScriptedGate(container)

    outcome = target_run(playbook, plan, container, gate=gate).rollback("bbbbbbbbbbbb")

    assert disk.full
    assert outcome.current == "aaaaaaaaaaaa"
    assert container.links[container.layout.current] == "releases/aaaaaaaaaaaa"
    assert container.server is not None  # the previous release serves again
    assert [asked[0] for asked in gate.asked] == ["aaaaaaaaaaaa"]  # gated on the way back
    assert (outcome.result, outcome.exit_code) == ("failed", 1), outcome.error  # a rollback
    lost = "the journal could not be written at 'rollback stop server'"
    assert any(lost in note for note in outcome.notes)
    assert container.layout.journal not in container.files  # settled: nothing to recover
    assert container.events[-2:] == ["journal cleared", "unlock"]
