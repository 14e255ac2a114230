"""Whose lock may be taken or removed: the holder's own lease, the heartbeat aged by the
container's uptime, and a holder whose process provably runs here, judged by the real
lock scripts under /bin/sh and real processes (issue 35 cause 1, issue 33 item 2)."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from shelltools import Processes, run, start_time

from orchestrator.container import lock
from orchestrator.container.lock import DeployLock, Owner
from orchestrator.errors import LockHeld
from orchestrator.layout import Layout
from orchestrator.transport.base import Result
from orchestrator.transport.memory import ANY, MemoryTransport

BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def on_this_machine() -> MemoryTransport:
    """Every command run for real, here, as built (the container is this machine)."""

    def execute(argv: Sequence[str], stdin: bytes | None) -> Result:
        done = run(list(argv), stdin or b"")
        return Result(tuple(argv), done.returncode, done.stdout, done.stderr)

    return MemoryTransport("ct-here").on(ANY, execute)


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def holder_lock(layout: Layout, holder: dict[str, object]) -> None:
    """The lock taken by `holder`, its owner record as written by its run."""
    assert run(lock.acquire_lock(layout.lock, json.dumps(holder))).returncode == 0


def age_heartbeat(layout: Layout, seconds: float, wall_seconds: float | None = None) -> None:
    """The heartbeat as last written `seconds` ago by the container's uptime, its mtime
    `wall_seconds` ago on the container's wall clock (a clock step makes them differ)."""
    assert seconds < uptime(), "this machine started too recently for the test"
    heartbeat = Path(layout.lock, "heartbeat")
    heartbeat.write_text(f"{uptime() - seconds:.2f}\n")
    then = time.time() - (seconds if wall_seconds is None else wall_seconds)
    os.utime(heartbeat, (then, then))


def elsewhere(run_id: str, lease: float | None) -> dict[str, object]:
    """A run on another control host: nothing about its process can be known here."""
    record = {"run_id": run_id, "user": "alice", "control_host": "ops-elsewhere", "pid": 4242}
    return {**record, "since": time.time(), "boot_id": "b00t", "pid_start": 77, "lease": lease}


def live_here(processes: Processes, run_id: str, lease: float = 600.0) -> dict[str, object]:
    """A run whose process runs on this control host (a real `sleep`), as Owner.me records it."""
    child = processes.spawn("sleep", "120")
    started = start_time(child.pid)
    assert started is not None
    return {
        "run_id": run_id,
        "user": "alice",
        "control_host": socket.gethostname(),
        "pid": child.pid,
        "since": time.time(),
        "lease": lease,
        "boot_id": BOOT_ID,
        "pid_start": int(started),
    }


def test_a_live_holder_is_judged_by_its_own_lease_not_the_takers(tmp_path: Path) -> None:
    layout = Layout(str(tmp_path))
    holder_lock(layout, elsewhere("run-a", lease=600))
    age_heartbeat(layout, 13)

    taker = DeployLock(on_this_machine(), layout, Owner.me("run-b", "bob"), lease=5)
    with pytest.raises(LockHeld) as refused:
        taker.acquire()

    assert "run run-a of alice@ops-elsewhere" in str(refused.value)
    assert "(lease 600 s)" in str(refused.value)
    assert '"run_id": "run-a"' in Path(layout.lock_owner).read_text()


def older_heartbeat(layout: Layout, seconds: float) -> None:
    """The heartbeat as an older orch wrote it: empty, its mtime `seconds` ago."""
    heartbeat = Path(layout.lock, "heartbeat")
    heartbeat.write_bytes(b"")
    os.utime(heartbeat, (time.time() - seconds, time.time() - seconds))


def test_an_older_lock_without_a_lease_is_judged_on_the_default_lease(tmp_path: Path) -> None:
    """Written by an older orch: no lease, no uptime in its heartbeat (aged by its mtime)."""
    layout = Layout(str(tmp_path))
    older = {"run_id": "run-old", "user": "alice", "control_host": "ops-elsewhere", "pid": 4242}
    holder_lock(layout, {**older, "since": time.time()})
    older_heartbeat(layout, 13)

    with pytest.raises(LockHeld):
        DeployLock(on_this_machine(), layout, Owner.me("run-b", "bob"), lease=5).acquire()

    older_heartbeat(layout, lock.DEFAULT_LEASE + 5)
    taker = DeployLock(on_this_machine(), layout, Owner.me("run-b", "bob"), lease=5)
    assert "beyond the lease of 600 s" in (taker.acquire() or "")


def test_a_step_of_the_containers_clock_does_not_age_a_live_heartbeat(tmp_path: Path) -> None:
    """The wall clock stepped 2 h ahead since the last beat: its mtime looks 2 h old, the
    uptime it holds says 10 s."""
    layout = Layout(str(tmp_path))
    holder_lock(layout, elsewhere("run-a", lease=3600))
    age_heartbeat(layout, 10, wall_seconds=7200 + 10)

    taker = DeployLock(on_this_machine(), layout, Owner.me("run-b", "bob"), lease=3600)
    with pytest.raises(LockHeld) as refused:
        taker.acquire()
    assert "heartbeat 10 s ago" in str(refused.value)


def test_a_holder_whose_process_runs_here_keeps_its_lock_whatever_its_heartbeat(
    tmp_path: Path, processes: Processes
) -> None:
    layout = Layout(str(tmp_path))
    holder_lock(layout, live_here(processes, "run-live", lease=5))
    age_heartbeat(layout, 60)

    with pytest.raises(LockHeld):
        DeployLock(on_this_machine(), layout, Owner.me("run-b", "bob"), lease=5).acquire()
    assert '"run_id": "run-live"' in Path(layout.lock_owner).read_text()


def test_a_reused_pid_is_not_taken_as_its_holder_alive(
    tmp_path: Path, processes: Processes
) -> None:
    """The PID runs, but started at another time than the lock records: another process."""
    layout = Layout(str(tmp_path))
    live = live_here(processes, "run-gone")
    holder_lock(layout, {**live, "pid_start": int(str(live["pid_start"])) - 1})

    taker = DeployLock(on_this_machine(), layout, Owner.me("run-b", "bob"))
    taken = taker.acquire()

    assert taken and f"its process {live['pid']} on {socket.gethostname()} is gone" in taken
    assert '"run_id": "run-b"' in Path(layout.lock_owner).read_text()


def test_a_heartbeat_from_before_the_container_started_is_at_least_the_uptime_old(
    tmp_path: Path,
) -> None:
    layout = Layout(str(tmp_path))
    assert run(lock.acquire_lock(layout.lock, "{}")).returncode == 0
    Path(layout.lock, "heartbeat").write_text(f"{uptime() + 1e6:.2f}\n")

    held = lock.parse_held(run(lock.read_lock(layout.lock)).stdout.decode())

    assert uptime() - 5 <= held.age <= uptime()


# -- orch unlock ------------------------------------------------------------------------------


def test_unlock_refuses_a_lock_whose_process_runs_here_naming_it(
    tmp_path: Path, processes: Processes
) -> None:
    layout = Layout(str(tmp_path))
    live = live_here(processes, "run-live")
    holder_lock(layout, live)
    older_heartbeat(layout, 7200)

    with pytest.raises(LockHeld) as refused:
        lock.remove(on_this_machine(), layout)

    message = str(refused.value)
    assert refused.value.exit_code == 3
    assert f"run run-live of alice@{socket.gethostname()}" in message
    assert f"its process {live['pid']} runs on" in message and "--force" in message
    assert Path(layout.lock_owner).exists()


def test_unlock_refuses_a_heartbeat_within_its_holders_lease(tmp_path: Path) -> None:
    layout = Layout(str(tmp_path))
    holder_lock(layout, elsewhere("run-a", lease=600))
    age_heartbeat(layout, 3)

    with pytest.raises(LockHeld) as refused:
        lock.remove(on_this_machine(), layout)

    assert "heartbeat is 3 s old, within its lease of 600 s" in str(refused.value)
    assert Path(layout.lock_owner).exists()


def test_unlock_removes_a_gone_owners_lock_and_says_whose(tmp_path: Path) -> None:
    layout = Layout(str(tmp_path))
    holder_lock(layout, elsewhere("run-a", lease=60))
    age_heartbeat(layout, 61)

    removed = lock.remove(on_this_machine(), layout)

    assert '"run_id": "run-a"' in removed
    assert not Path(layout.lock).exists()
    assert lock.remove(on_this_machine(), layout) == ""


def test_forced_unlock_removes_a_live_lock_and_its_run_notices_at_its_next_renewal(
    tmp_path: Path,
) -> None:
    layout = Layout(str(tmp_path))
    mine = DeployLock(on_this_machine(), layout, Owner.me("run-live", "alice"), lease=600)
    assert mine.acquire() is None
    mine.renew()
    assert mine.lost is None

    removed = lock.remove(on_this_machine(), layout, force=True)

    assert '"run_id": "run-live"' in removed and not Path(layout.lock).exists()
    mine.renew()
    assert mine.lost and "removed" in mine.lost and "orch unlock" in mine.lost
