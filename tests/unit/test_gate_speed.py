"""The gate's speed levels on an in-memory vLLM (tests/scripted.py): streamed requests per
level, the batch read beside them, the verdict against a reference joined to the gate's."""

from __future__ import annotations

import json
import threading

from clocks import FakeClock
from scripted import metrics, serving
from transactions import BUCKETS, CAUSES, FAST_GATE

from orchestrator.container.audit import audit_line, release_gate
from orchestrator.contract import jsonable
from orchestrator.deadline import Deadline
from orchestrator.gate import run_gate, speed_lines
from orchestrator.gate.probe import Target
from orchestrator.gate.speed import SpeedTraffic, measure_speed
from orchestrator.metrics.speed import Figure
from orchestrator.metrics.speedup import NO_REFERENCE, ReferenceLevel, SpeedReference
from orchestrator.playbook_speed import Speed
from orchestrator.transport.memory import MemoryTransport

SPEED_GATE = FAST_GATE.model_copy(
    update={"speed": Speed(production_concurrency=4, max_requests=12), "time_budget": 30}
)


class Served(MemoryTransport):
    """The in-memory vLLM, keeping the completion requests' bodies."""

    bodies: list[dict[str, object]]


def served(clock: FakeClock, foreign: int = 0) -> Served:
    """Streamed requests that outlast a batch read, timed on the gate's `clock`."""
    transport = Served()
    transport.bodies = []
    serving(transport, "m", request_seconds=0.01, stream_seconds=0.1, clock=clock)
    complete = transport.http[("POST", "/v1/completions")]

    def kept(body: bytes) -> tuple[int, bytes]:
        transport.bodies.append(json.loads(body))
        return complete(body)

    transport.on_http("POST", "/v1/completions", kept)
    if foreign:
        scrapes = iter(range(1, 10_000))
        transport.on_http("GET", "/metrics", lambda _: (200, metrics(next(scrapes), foreign)))
    return transport


def test_without_a_reference_speed_is_recorded_at_each_level_and_blocks_nothing() -> None:
    clock = FakeClock()
    transport = served(clock)
    report = run_gate(transport, "10.0.0.5", 8000, "m", SPEED_GATE, BUCKETS, CAUSES, clock=clock)
    assert report.verdict.outcome == "pass", report.verdict.reason
    speed = report.speed
    assert speed is not None
    assert (speed.verdict, speed.reason, speed.streamed) == ("not_judged", NO_REFERENCE, True)
    assert [level.concurrency for level in speed.levels] == [1, 4]
    for level in speed.levels:
        assert 2 * level.concurrency <= level.requests <= 12
        assert level.total_tokens_per_second is not None
        assert level.total_tokens_per_second.mean > 0
        assert level.output_tokens == 4 * level.requests
        assert level.foreign_share == 0.0
    streamed = [body for body in transport.bodies if body.get("stream")]
    assert streamed and all(b["stream_options"] == {"include_usage": True} for b in streamed)
    assert speed.requests == 1 + sum(level.requests for level in speed.levels)


def test_a_release_provably_slower_than_its_baseline_fails_the_gate_naming_the_level() -> None:
    far = Figure(1e9, 0.99e9, 1.01e9)
    baseline = SpeedReference(
        "baseline", "recorded 2026-12-04", (ReferenceLevel(1, far), ReferenceLevel(4, far))
    )
    clock = FakeClock()
    report = run_gate(
        served(clock),
        "10.0.0.5",
        8000,
        "m",
        SPEED_GATE,
        BUCKETS,
        CAUSES,
        reference=baseline,
        clock=clock,
    )
    assert report.verdict.outcome == "fail"
    assert report.verdict.reason.startswith("speed: speedup 0.00x")
    assert (
        "at 1 stream < min_speedup 1 against baseline recorded 2026-12-04" in report.verdict.reason
    )
    assert "; acceptance: every phase passed" in report.verdict.reason
    printed = jsonable(report)
    assert printed["verdict"] == "fail"
    assert printed["speed"]["levels"][0]["speedup"]["upper"] < 1
    assert any("speed at 1 stream" in line for line in speed_lines(report.speed))


def test_other_clients_requests_in_the_batch_make_speed_inconclusive_never_a_pass() -> None:
    near = Figure(1.0, 0.9, 1.1)  # anything the in-memory server does is far faster
    baseline = SpeedReference("baseline", "b", (ReferenceLevel(1, near), ReferenceLevel(4, near)))
    clock = FakeClock()
    transport = served(clock, foreign=40)
    report = run_gate(
        transport,
        "10.0.0.5",
        8000,
        "m",
        SPEED_GATE,
        BUCKETS,
        CAUSES,
        reference=baseline,
        clock=clock,
    )
    assert report.speed is not None
    assert {level.verdict for level in report.speed.levels} == {"inconclusive"}
    assert report.verdict.outcome == "inconclusive"
    assert "other clients' requests" in report.verdict.reason


def test_a_disabled_speed_phase_sends_no_streamed_request() -> None:
    clock = FakeClock()
    transport = served(clock)
    gate = SPEED_GATE.model_copy(update={"speed": Speed(enabled=False)})
    report = run_gate(transport, "10.0.0.5", 8000, "m", gate, BUCKETS, CAUSES, clock=clock)
    assert report.speed is None
    assert transport.bodies
    assert not any(body.get("stream") for body in transport.bodies)


def test_the_audit_keeps_each_levels_figures_for_status_and_a_later_reference() -> None:
    clock = FakeClock()
    report = run_gate(
        served(clock), "10.0.0.5", 8000, "m", SPEED_GATE, BUCKETS, CAUSES, clock=clock
    )
    target = {"result": "deployed", "release": "r2", "current": "r2", "gate": jsonable(report)}
    line = audit_line("run1", "ops", "deploy", target)
    recorded = json.loads(line)
    assert [lv["concurrency"] for lv in recorded["speed"]["levels"]] == [1, 4]
    gate = release_gate([line], "r2")
    assert gate is not None
    assert gate["speed"]["levels"][1]["total_tokens_per_second"]["mean"] > 0


def test_a_gate_stopped_during_its_speed_levels_did_not_pass() -> None:
    stop = threading.Event()
    heard: list[str] = []

    def tick(line: str) -> None:
        heard.append(line)
        if "speed at" in line:
            stop.set()

    clock = FakeClock()
    transport = served(clock)
    report = run_gate(
        transport, "10.0.0.5", 8000, "m", SPEED_GATE, BUCKETS, CAUSES, stop, tick=tick, clock=clock
    )
    assert report.verdict.outcome == "inconclusive"
    assert report.verdict.reason.startswith("speed: interrupted during the speed levels")


def test_a_server_that_refuses_connections_is_said_so_not_raised() -> None:
    refusing = MemoryTransport()  # no route answers: every connection is refused
    target = Target(refusing, "10.0.0.5", 8000, "m")
    traffic = SpeedTraffic(("hello",), 8, {})
    deadline = Deadline.after(5, clock=FakeClock())
    report = measure_speed(target, Speed(concurrency=[2]), traffic, 0.95, deadline)
    (level,) = report.levels
    assert level.total_tokens_per_second is None
    assert level.request_errors >= 3 and level.requests == 0
    assert level.reason.startswith("speed not measured: ") and "refused" in level.reason
