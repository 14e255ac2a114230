"""Deadlines on the lab: a server that drips its answers, a connection that goes away.

Each case bounds a run that used to have no bound at all (it waited for the next byte
or for a step's whole timeout); the bounds are generous, they catch a hang, not a
slow machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtools import LabHandle
from orchrun import ROOT

from orchestrator.lab.paths import ContainerPaths, pid_alive

pytestmark = pytest.mark.lab

FAST = ["--set", "gate.probe.scrape_interval=0.5"]
SLACK = 15.0
"""Seconds a step may run past its budget: a last look at the log, a rollback's start."""


def deploy(lab: LabHandle, name: str, *args: str) -> tuple[int, dict]:
    result = lab.orch(
        "deploy", "qwen-dflash", "-i", str(lab.inventory), "--limit", name, "--json", *FAST, *args
    )
    assert result.stdout, result.stderr
    return result.code, result.json["targets"][0]


def faulty(faults: dict) -> list[str]:
    return ["--set", f"server.env.ORCH_LAB_FAULTS={json.dumps(json.dumps(faults))}"]


def current(lab: LabHandle, name: str) -> Path:
    return (lab.deployment_dir(name) / "current").readlink()


def test_dripping_health_ends_at_ready_timeout_and_rolls_back(lab: LabHandle) -> None:
    code, first = deploy(lab, "ct201", "--set", "gate.ready_timeout=30")
    assert code == 0, first["error"]
    code, entry = deploy(
        lab, "ct201", "--set", "gate.ready_timeout=6", *faulty({"drip_health_seconds": 2})
    )
    assert code == 1, entry["error"]
    assert entry["result"] == "rolled_back"
    assert "not ready after 6 s (ready_timeout)" in entry["gate"]["reason"]
    assert entry["steps"]["wait ready"] < 6 + SLACK
    assert entry["rollback_gate"]["verdict"] == "pass"
    assert current(lab, "ct201") == Path("releases") / first["release"]


def test_dripping_metrics_ends_the_gate_at_its_time_budget(lab: LabHandle) -> None:
    code, first = deploy(lab, "ct201", "--set", "gate.ready_timeout=30")
    assert code == 0, first["error"]
    code, entry = deploy(
        lab,
        "ct201",
        "--set",
        "gate.ready_timeout=30",
        "--set",
        "gate.time_budget=8",
        "--set",
        "gate.acceptance_source=counters",  # per-request figures never read /metrics
        *faulty({"drip_metrics_seconds": 1}),
    )
    assert code == 1, entry["error"]
    assert entry["result"] == "rolled_back"
    assert entry["gate"]["verdict"] == "inconclusive", entry["gate"]
    assert "could not measure" in entry["gate"]["reason"]
    assert entry["steps"]["gate"] < 8 + SLACK
    assert current(lab, "ct201") == Path("releases") / first["release"]


def test_status_answers_although_health_drips(lab: LabHandle) -> None:
    """The previous release drips too (the lab's fault file), so even the rollback
    cannot pass: needs attention, and `status` still answers."""
    # The rollback waits the whole ready_timeout its release recorded: a few times the
    # second that release needs to get ready, not more.
    code, first = deploy(lab, "ct201", "--set", "gate.ready_timeout=10")
    assert code == 0, first["error"]
    container = ContainerPaths(lab.deployment_dir("ct201").parents[4])
    container.faults.write_text(json.dumps({"drip_health_seconds": 2}))
    changed = ["--set", "server.env.X=changed"]
    code, entry = deploy(lab, "ct201", "--set", "gate.ready_timeout=4", *changed)
    assert code == 3, entry["error"]
    assert "ROLLBACK" in entry["error"]
    status = lab.orch(
        "status", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct201", "--json", timeout=60
    )
    assert status.code == 3
    (row,) = status.json["targets"]
    assert (row["server"], row["health"], row["state"]) == ("running", None, "unhealthy")


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, found by parent PID in /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def host_sshd(lab: LabHandle, name: str) -> int:
    return next(n.pid for n in lab.lab.nodes() if n.name == name)


def connection_sshd(listener: int) -> list[int]:
    """The sshd processes serving the listener's connections, not the commands they run:
    a command killed or frozen midway could leave a lock of the machine's own behind."""
    found = []
    for pid in descendants(listener):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                found.append(pid)
        except OSError:
            continue
    return found


def signal_all(pids: list[int], signum: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue


def start_waiting_deploy(lab: LabHandle) -> subprocess.Popen[str]:
    """A deploy of ct200 (reached through pve1) that waits for a server that never loads."""
    argv = [sys.executable, "-m", "orchestrator", "deploy", "qwen-dflash"]
    argv += ["-i", str(lab.inventory), "--limit", "ct200", "--json", *FAST]
    argv += ["--set", "gate.ready_timeout=300", *faulty({"hang_while_loading": True})]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=lab.env, cwd=ROOT
    )


def wait_for_step(lab: LabHandle, process: subprocess.Popen[str]) -> None:
    """Until the new server was started and orch polls it."""
    records = ContainerPaths(lab.deployment_dir("ct200").parents[4]).servers_dir
    for _ in range(2400):  # generous: every SSH login on a busy machine may be slow
        assert process.poll() is None, process.communicate()
        if records.exists() and any(records.iterdir()):
            time.sleep(1.0)
            return
        time.sleep(0.1)
    raise AssertionError("the deploy never started its server")


def finish(process: subprocess.Popen[str], within: float) -> tuple[int, dict]:
    try:
        stdout, stderr = process.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise AssertionError(f"orch still running {within} s after the connection went") from None
    assert stdout, stderr
    return process.returncode, json.loads(stdout)["targets"][0]


def reported_lost(entry: dict) -> bool:
    """The step in flight says its connection was lost, or the next one that the host is
    gone (whichever the connection's end interrupted)."""
    said = entry["error"] + (entry.get("gate") or {}).get("reason", "")
    return "connection lost" in said or "pve1: connect: " in said


def test_killed_connection_is_reported_within_seconds(lab: LabHandle) -> None:
    process = start_waiting_deploy(lab)
    wait_for_step(lab, process)
    listener = host_sshd(lab, "pve1")
    connection = connection_sshd(listener)
    assert connection, "orch holds no connection to pve1"
    os.kill(listener, signal.SIGTERM)  # the host goes away: no new connection either
    for _ in range(100):
        if not pid_alive(listener):
            break
        time.sleep(0.1)
    signal_all(connection, signal.SIGKILL)
    code, entry = finish(process, within=60)
    assert code == 3, entry
    assert entry["error"].startswith("pve1: ")
    assert reported_lost(entry), entry


def test_silent_connection_is_noticed_within_seconds(lab: LabHandle) -> None:
    """A host that stops answering but keeps its TCP connection open (a frozen sshd,
    as behind a dead link): only a reply that never comes can tell."""
    process = start_waiting_deploy(lab)
    wait_for_step(lab, process)
    listener = host_sshd(lab, "pve1")
    frozen = [listener, *connection_sshd(listener)]
    try:
        signal_all(frozen, signal.SIGSTOP)
        code, entry = finish(process, within=200)  # below ready_timeout: it never waited it out
    finally:
        signal_all(frozen, signal.SIGCONT)
    assert entry["steps"]["wait ready"] < 60
    assert code == 3, entry
    assert entry["error"].startswith("pve1: ")
    assert reported_lost(entry), entry
