"""`orch status --wait` through in-memory connections on a fake clock: it reads the
status again until no run is at work and no server is coming up, then gives it as it
stands; out of time it needs attention, stopped it is interrupted."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from clocks import FakeClock
from fleets import Fleet, checked
from scripted import serving

from orchestrator.container.lock import Owner
from orchestrator.deadline import Deadline
from orchestrator.fleet.wait import POLL_SECONDS, wait_for_status

SERVED = "qwen3.6-27b"


def served_fleet() -> Fleet:
    fleet = Fleet()
    for name in fleet.plans:
        fleet.deployed(name)
        serving(fleet.containers[name].transport, SERVED)
    return fleet


def lock_by_this_process(fleet: Fleet, name: str) -> str:
    """A live run's lock (this process, on this machine): its owner file's path."""
    owner = Owner("run-live", "ops", socket.gethostname(), os.getpid(), time.time())
    path = fleet.plans[name].layout.lock_owner
    fleet.containers[name].files[path] = owner.to_json().encode()
    return path


def test_a_settled_fleet_is_its_status_at_once() -> None:
    fleet, clock, said = served_fleet(), FakeClock(), []

    document, code = wait_for_status(
        fleet.inputs, Deadline.after(60, clock=clock), said.append, fleet.connect
    )

    assert (code, document.state, said, clock.slept) == (0, "serving", [], 0.0)


def test_the_wait_ends_when_the_run_at_work_lets_go() -> None:
    fleet, clock, said = served_fleet(), FakeClock(), []
    path = lock_by_this_process(fleet, "ct200")

    def say(line: str) -> None:
        said.append(line)
        fleet.containers["ct200"].files.pop(path)  # the run ends

    document, code = wait_for_status(
        fleet.inputs, Deadline.after(60, clock=clock), say, fleet.connect
    )

    assert said == [f"waiting for ct200: run run-live by ops@{socket.gethostname()}"]
    assert (code, checked(document, "Status")["state"]) == (0, "serving")
    assert clock.slept == POLL_SECONDS


def test_a_server_coming_up_is_waited_for_too() -> None:
    fleet, clock, said = served_fleet(), FakeClock(), []
    transport = fleet.containers["ct129"].transport
    transport.on_http("GET", "/health", lambda _: (503, b"loading"))

    def say(line: str) -> None:
        said.append(line)
        serving(transport, SERVED)

    document, code = wait_for_status(
        fleet.inputs, Deadline.after(60, clock=clock), say, fleet.connect
    )

    assert said == ["waiting for ct129: server not healthy yet (/health: HTTP 503)"]
    assert (code, document.state) == (0, "serving")


def test_out_of_time_the_wait_needs_attention_and_says_what_it_waited_for() -> None:
    fleet, clock, said = served_fleet(), FakeClock(), []
    lock_by_this_process(fleet, "ct200")

    document, code = wait_for_status(
        fleet.inputs, Deadline.after(9, clock=clock), said.append, fleet.connect
    )

    assert (code, checked(document, "Status")["result"], document.state) == (
        3,
        "needs_attention",
        "deploying",
    )
    assert said[0].startswith("waiting for ct200: run run-live")  # once, not every poll
    assert said[1].startswith("still waiting after 9 s: ct200: run run-live")
    assert len(said) == 2 and clock.slept == 9


def test_a_stopped_wait_is_interrupted_with_the_status_it_last_read() -> None:
    fleet, clock, stop = served_fleet(), FakeClock(), threading.Event()
    lock_by_this_process(fleet, "ct200")

    document, code = wait_for_status(
        fleet.inputs, Deadline.after(60, stop, clock), lambda _: stop.set(), fleet.connect
    )

    assert (code, checked(document, "Status")["result"]) == (130, "interrupted")
    assert document.state == "deploying" and clock.slept == 0.0


def test_a_run_paused_for_a_decision_ends_the_wait_needing_someone() -> None:
    """A paused gate does not move by itself (until its pause timeout): the wait stops
    there and says `paused`, exit 3, as status does."""
    fleet, clock, said = served_fleet(), FakeClock(), []
    lock_by_this_process(fleet, "ct200")
    journal = {
        "run_id": "run-live",
        "action": "deploy",
        "owner": "ops@here",
        "from_release": None,
        "to_release": "d1e2f3a4b5c6",
        "step": "paused",
        "started": "t0",
        "updated": "t1",
    }
    layout = fleet.plans["ct200"].layout
    fleet.containers["ct200"].files[layout.journal] = json.dumps(journal).encode()

    document, code = wait_for_status(
        fleet.inputs, Deadline.after(60, clock=clock), said.append, fleet.connect
    )

    assert (code, checked(document, "Status")["state"], said, clock.slept) == (
        3,
        "paused",
        [],
        0.0,
    )
