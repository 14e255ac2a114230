"""`orch status` and `orch unlock` through in-memory connections, as tables: each row
scripts the same state on every container (tests/scripted.py), reads it through the
body the CLI calls, and checks the container's state, the fleet's and the exit code."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable

import pytest
from fleets import RUN_A, Fleet, checked
from scripted import serving

from orchestrator.container.audit import audit_line
from orchestrator.container.lock import Owner
from orchestrator.fleet.decide import decide
from orchestrator.fleet.status import status
from orchestrator.fleet.unlock import unlock
from orchestrator.report.tables import print_status

Setup = Callable[[Fleet, str], None]
SERVED = "qwen3.6-27b"


def nothing(fleet: Fleet, name: str) -> None:
    """Nothing ever deployed."""


def deployed(fleet: Fleet, name: str) -> None:
    """A deploy's release, its server running, /health not answering."""
    fleet.deployed(name)


def healthy(fleet: Fleet, name: str) -> None:
    fleet.deployed(name)
    serving(fleet.containers[name].transport, SERVED)


def health_503(fleet: Fleet, name: str) -> None:
    fleet.deployed(name)
    fleet.containers[name].transport.on_http("GET", "/health", lambda _: (503, b"loading"))


def server_gone(fleet: Fleet, name: str) -> None:
    """Deployed, then its server and its PID record went, not by `orch stop`: the last
    run is the deploy."""
    fleet.deployed(name)
    fleet.containers[name].server = None


OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def crashed(fleet: Fleet, name: str) -> None:
    """Deployed, then its server's process ended by itself, its PID still recorded."""
    fleet.deployed(name)
    fleet.containers[name].crash("Traceback (most recent call last):", OOM)


def stopped_by_orch(fleet: Fleet, name: str) -> None:
    fleet.deployed(name)
    fleet.containers[name].server = None
    stop = {"result": "stopped", "release": None, "current": None}
    fleet.containers[name].audit(audit_line("20261202T100000Z-bbbbbb", "ops", "stop", stop))


def locked_by_a_live_run(fleet: Fleet, name: str) -> None:
    """Served, and a run of this process on this machine holds the lock."""
    healthy(fleet, name)
    owner = Owner("run-live", "ops", socket.gethostname(), os.getpid(), time.time())
    fleet.containers[name].files[fleet.plans[name].layout.lock_owner] = owner.to_json().encode()


def locked_by_a_dead_run(fleet: Fleet, name: str) -> None:
    """Served; the lock's owner was a process of this machine that is gone."""
    healthy(fleet, name)
    owner = Owner("run-dead", "ops", socket.gethostname(), 2**22 + 17, time.time() - 60)
    fleet.containers[name].files[fleet.plans[name].layout.lock_owner] = owner.to_json().encode()


def locked_by_hand(fleet: Fleet, name: str) -> None:
    """An owner file a person wrote an hour ago (no run renews it)."""
    healthy(fleet, name)
    fleet.containers[name].heartbeat_age = 3600
    fleet.containers[name].files[fleet.plans[name].layout.lock_owner] = b"maintenance by bob"


def interrupted(fleet: Fleet, name: str) -> None:
    healthy(fleet, name)
    fleet.containers[name].files[fleet.plans[name].layout.journal] = json.dumps(
        {"run_id": "run-dead", "action": "deploy", "owner": "ops@ctl pid 1",
         "from_release": None, "to_release": "abc", "step": "start server",
         "started": "t0", "updated": "t1"}
    ).encode()  # fmt: skip


@pytest.mark.parametrize(
    ("setup", "state", "code"),
    [
        (nothing, "nothing_deployed", 0),
        (healthy, "serving", 0),
        (deployed, "unhealthy", 3),
        (health_503, "unhealthy", 3),
        (server_gone, "stopped", 3),
        (crashed, "crashed", 3),
        (stopped_by_orch, "stopped", 0),
        (locked_by_a_live_run, "deploying", 0),
        (locked_by_a_dead_run, "serving", 0),
        (locked_by_hand, "serving", 0),
        (interrupted, "interrupted", 3),
    ],
)
def test_status_of_a_fleet_in_one_state(setup: Setup, state: str, code: int) -> None:
    fleet = Fleet()
    for name in fleet.plans:
        setup(fleet, name)

    printed, exit_code = status(fleet.inputs, fleet.connect)

    document = checked(printed, "Status")
    assert [t["state"] for t in document["targets"]] == [state, state]
    assert (document["state"], exit_code) == (state, code)
    assert document["result"] == ("ok" if code == 0 else "needs_attention")


@pytest.mark.parametrize(
    ("setup", "lock"),
    [
        (nothing, None),
        (healthy, None),
        (locked_by_hand, {"text": "maintenance by bob"}),
    ],
)
def test_status_shows_the_lock_as_its_holder(setup: Setup, lock: object) -> None:
    fleet = Fleet()
    for name in fleet.plans:
        setup(fleet, name)

    printed, _ = status(fleet.inputs, fleet.connect)

    assert [t["lock"] for t in checked(printed, "Status")["targets"]] == [lock, lock]


def test_status_names_a_live_runs_owner_and_its_lock() -> None:
    fleet = Fleet()
    for name in fleet.plans:
        locked_by_a_live_run(fleet, name)

    printed, _ = status(fleet.inputs, fleet.connect)

    for target in checked(printed, "Status")["targets"]:
        assert target["lock"]["run_id"] == "run-live"
        assert target["lock"]["pid"] == os.getpid()
        assert list(target["lock"]) == [
            "run_id",
            "user",
            "control_host",
            "pid",
            "since",
            "lease",
            "boot_id",
            "pid_start",
        ]
        assert target["deploying"]["owner"] == f"ops@{socket.gethostname()}"


def test_status_gives_the_last_run_and_the_gate_that_admitted_the_release() -> None:
    fleet = Fleet()
    for name in fleet.plans:
        stopped_by_orch(fleet, name)

    printed, _ = status(fleet.inputs, fleet.connect)

    for target in checked(printed, "Status")["targets"]:
        assert (target["last_run"]["action"], target["last_run"]["result"]) == ("stop", "stopped")
        assert target["release_gate"] is None or target["release_gate"]["run_id"] == RUN_A


@pytest.mark.parametrize(
    ("setup", "removed"),
    [
        (nothing, None),
        (healthy, None),
        (locked_by_hand, {"text": "maintenance by bob"}),
        (locked_by_a_dead_run, "run-dead"),
    ],
)
def test_unlock_removes_a_lock_no_live_run_holds(setup: Setup, removed: object) -> None:
    fleet = Fleet()
    for name in fleet.plans:
        setup(fleet, name)

    printed, code = unlock(fleet.inputs, fleet.connect)

    assert code == 0
    for target in checked(printed, "Unlock")["targets"]:
        lock = target["removed_lock"]
        assert (lock["run_id"] if isinstance(removed, str) else lock) == removed
    for name, container in fleet.containers.items():
        assert fleet.plans[name].layout.lock_owner not in container.files
    again, _ = status(fleet.inputs, fleet.connect)
    assert {t["lock"] is None for t in checked(again, "Status")["targets"]} == {True}


def test_unlock_refuses_a_live_runs_lock_naming_it_and_removes_it_when_forced() -> None:
    fleet = Fleet()
    for name in fleet.plans:
        locked_by_a_live_run(fleet, name)

    printed, code = unlock(fleet.inputs, fleet.connect)

    assert code == 3
    for target in checked(printed, "Unlock")["targets"]:
        assert "run-live" in target["error"] and "--force" in target["error"]
    for name, container in fleet.containers.items():
        assert fleet.plans[name].layout.lock_owner in container.files

    forced, code = unlock(fleet.inputs, fleet.connect, force=True)

    assert code == 0
    assert {t["removed_lock"]["run_id"] for t in checked(forced, "Unlock")["targets"]} == {
        "run-live"
    }
    for name, container in fleet.containers.items():
        assert fleet.plans[name].layout.lock_owner not in container.files


@pytest.mark.parametrize(
    "edited",
    [
        {"mean_acceptance_length": "high", "verdict": "pass"},
        {"current_gate": "yes"},
        {"current_gate": {"verdict": ["pass"], "mean_acceptance_length": 3.0}},
        {"action": 5},
        {"speed": {"verdict": "pass", "levels": ["fast"]}},
    ],
)
def test_status_in_text_reads_past_an_audit_line_edited_to_a_wrong_type(
    edited: dict, capsys: pytest.CaptureFixture
) -> None:
    fleet = Fleet()
    for name in fleet.plans:
        release = fleet.deployed(name)
        line = json.loads(audit_line("20261203T100000Z-cccccc", "ops", "deploy", {}))
        fleet.containers[name].audit(json.dumps({**line, "current": release, **edited}))

    printed, _ = status(fleet.inputs, fleet.connect)
    print_status(printed)

    shown = capsys.readouterr().out
    for name in fleet.plans:
        assert name in shown
    for target in checked(printed, "Status")["targets"]:
        assert target["last_run"]["run_id"] == RUN_A  # the edited line is left out


def test_a_crashed_server_is_told_from_a_stopped_one_by_its_logs_last_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fleet = Fleet()
    crashed(fleet, "ct200")
    stopped_by_orch(fleet, "ct129")

    printed, code = status(fleet.inputs, fleet.connect)

    document = checked(printed, "Status")
    by_name = {t["name"]: t for t in document["targets"]}
    assert (by_name["ct200"]["state"], by_name["ct200"]["log_end"]) == ("crashed", OOM)
    assert (by_name["ct129"]["state"], "log_end" in by_name["ct129"]) == ("stopped", False)
    assert (document["state"], code) == ("crashed", 3)
    print_status(printed)
    shown = capsys.readouterr().out
    assert f"ct200: crashed: the server exited, not stopped by orch; its log ends: {OOM}" in shown
    assert "exited pid" in shown


# -- a run paused for a decision ----------------------------------------------------------------


def at_step(step: str) -> Setup:
    """Served, a live run holding the lock, its journal at `step`."""

    def setup(fleet: Fleet, name: str) -> None:
        locked_by_a_live_run(fleet, name)
        journal = {
            "run_id": "run-live",
            "action": "deploy",
            "owner": "ops@here",
            "from_release": None,
            "to_release": "d1e2f3a4b5c6",
            "step": step,
            "started": "2026-12-04T22:00:00+00:00",
            "updated": "2026-12-04T22:01:00+00:00",
        }
        fleet.containers[name].files[fleet.plans[name].layout.journal] = json.dumps(
            journal
        ).encode()

    return setup


def test_a_paused_run_is_shown_with_the_commands_that_decide_and_needs_someone() -> None:
    fleet = Fleet()
    for name in fleet.plans:
        at_step("paused")(fleet, name)

    printed, code = status(fleet.inputs, fleet.connect)

    document = checked(printed, "Status")
    assert (code, document["state"]) == (3, "paused")
    for target in document["targets"]:
        run = target["deploying"]
        assert (target["state"], run["run_id"]) == ("paused", "run-live")
        assert run["paused_since"] == "2026-12-04T22:01:00+00:00"
        inventory = str(fleet.inputs.inventory_path)
        assert run["decide"]["promote"] == (
            f"orch promote {fleet.inputs.playbook_ref} -i {inventory} --limit {target['name']}"
        )


def test_a_decision_is_written_for_the_paused_run_naming_who_decided() -> None:
    fleet = Fleet()
    for name in fleet.plans:
        at_step("paused")(fleet, name)

    printed, code = decide(fleet.inputs, "promote", fleet.connect, by="ann@ops")

    document = checked(printed, "Decide")
    assert (code, document["decision"]) == (0, "promote")
    for target in document["targets"]:
        assert (target["run_id"], target["release"]) == ("run-live", "d1e2f3a4b5c6")
    for name, container in fleet.containers.items():
        written = json.loads(container.files[fleet.plans[name].layout.decision])
        assert (written["run_id"], written["choice"], written["by"]) == (
            "run-live",
            "promote",
            "ann@ops",
        )


@pytest.mark.parametrize(
    ("setup", "says"),
    [
        (healthy, "no run holds the deploy lock here"),
        (at_step("gate"), "is at 'gate', not paused"),
        (locked_by_a_live_run, "holds the deploy lock, but not paused"),
        (locked_by_a_dead_run, "holds the deploy lock, but not paused"),
    ],
)
def test_a_decision_where_no_run_is_paused_is_refused_and_writes_nothing(
    setup: Setup, says: str
) -> None:
    fleet = Fleet()
    for name in fleet.plans:
        setup(fleet, name)

    printed, code = decide(fleet.inputs, "abort", fleet.connect)

    assert code == 2
    for target in checked(printed, "Decide")["targets"]:
        assert says in target["error"]
    for name, container in fleet.containers.items():
        assert fleet.plans[name].layout.decision not in container.files


def test_a_decision_for_a_paused_run_that_is_gone_is_refused() -> None:
    fleet = Fleet()
    for name in fleet.plans:
        at_step("paused")(fleet, name)
        locked_by_a_dead_run(fleet, name)
        journal_path = fleet.plans[name].layout.journal
        journal = json.loads(fleet.containers[name].files[journal_path])
        fleet.containers[name].files[journal_path] = json.dumps(
            {**journal, "run_id": "run-dead"}
        ).encode()

    printed, code = decide(fleet.inputs, "promote", fleet.connect)

    assert code == 2
    for target in checked(printed, "Decide")["targets"]:
        assert "is gone" in target["error"] and "the next deploy rolls" in target["error"]


def test_a_decision_passes_by_the_containers_where_nothing_is_paused() -> None:
    fleet = Fleet()
    at_step("paused")(fleet, "ct200")
    healthy(fleet, "ct129")

    printed, code = decide(fleet.inputs, "promote", fleet.connect)

    targets = {t["name"]: t for t in checked(printed, "Decide")["targets"]}
    assert (code, targets["ct200"]["run_id"]) == (0, "run-live")
    assert targets["ct129"]["result"] == "skipped"
    assert "no run holds the deploy lock here" in targets["ct129"]["note"]
    assert fleet.plans["ct129"].layout.decision not in fleet.containers["ct129"].files
