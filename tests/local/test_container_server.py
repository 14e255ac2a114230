"""The server's scripts run for real: start detached, state, stop by PID and group,
watch; every process a test starts is killed by PID and start time when it ends."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from shelltools import (
    Processes,
    proc_state,
    run,
    running,
    start_time,
    wait_until,
)

from orchestrator.container.server import (
    ServerState,
    parse_server_state,
    parse_started,
    server_state,
    start_server,
    stop_server,
    watch_server,
)
from orchestrator.container.shell import (
    parse_frames,
    q,
)
from orchestrator.layout import Layout


def start_release(deployment: Path, release: str) -> list[str]:
    """The argv that starts `releases/<release>/serve.sh`, its log in the release."""
    layout = Layout(str(deployment))
    return start_server(
        f"{layout.release(release)}/serve.sh",
        layout.release_log(release),
        layout.server_pid,
        layout.server_log,
        Layout.log_link_target(release),
    )


def start(deployment: Path, launch: str, processes: Processes, release: str = "r1") -> int:
    script = deployment / "releases" / release / "serve.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(launch)
    done = run(start_release(deployment, release))
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    processes.track(pid)
    return pid


def state(deployment: Path) -> ServerState:
    done = run(server_state(str(deployment / "server.pid")))
    assert done.returncode == 0, done.stderr
    return parse_server_state(done.stdout.decode())


def stop(deployment: Path, timeout: float = 5.0) -> str:
    done = run(stop_server(str(deployment / "server.pid"), timeout))
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def test_a_log_link_that_cannot_be_made_starts_nothing(deployment: Path) -> None:
    (deployment / "server.log" / "in the way").mkdir(parents=True)
    script = deployment / "releases" / "r1" / "serve.sh"
    script.parent.mkdir(parents=True)
    script.write_text("exec sleep 60\n")
    done = run(start_release(deployment, "r1"))
    assert done.returncode == 1
    assert not (deployment / "server.pid").exists()
    assert not (deployment / "releases" / "r1" / "server.log").exists()


def test_start_detaches_records_pid_and_start_time_then_stop_terminates(
    deployment: Path, processes: Processes
) -> None:
    pid = start(deployment, "echo started\nexec sleep 60\n", processes)

    pid_file = (deployment / "server.pid").read_text()
    assert pid_file == f"{pid} {start_time(pid)}\n"
    wait_until(lambda: (deployment / "server.log").read_text() == "started\n")
    assert os.getsid(pid) == pid and os.getpgid(pid) == pid
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    assert os.readlink(f"/proc/{pid}/fd/1") == str(deployment / "releases/r1/server.log")
    assert os.readlink(deployment / "server.log") == "releases/r1/server.log"
    assert state(deployment) == ServerState("running", pid)

    assert stop(deployment) == f"stopped {pid}"

    assert not running(pid)
    assert not (deployment / "server.pid").exists()
    assert state(deployment) == ServerState("none")
    assert stop(deployment) == "none"


def start_with_worker(deployment: Path, worker: str, processes: Processes) -> tuple[int, int]:
    """A server whose launch script leaves a worker process in its group, as vLLM does."""
    launch = f"{worker} &\necho $! > worker.pid\nexec sleep 60\n"
    pid = start(deployment, f"cd {q(str(deployment))}\n{launch}", processes)
    worker_file = deployment / "worker.pid"
    wait_until(lambda: worker_file.is_file() and worker_file.read_text().endswith("\n"))
    worker_pid = int(worker_file.read_text())
    processes.track(worker_pid)
    return pid, worker_pid


def test_stop_terminates_the_whole_process_group(deployment: Path, processes: Processes) -> None:
    pid, worker = start_with_worker(deployment, "sleep 60", processes)
    assert os.getpgid(worker) == pid

    assert stop(deployment) == f"stopped {pid}"

    assert not running(pid)
    wait_until(lambda: not running(worker), timeout=0.5)


def test_a_worker_ignoring_sigterm_is_killed_though_its_leader_exited(
    deployment: Path, processes: Processes
) -> None:
    """vLLM's workers hold the GPU memory: stop returns only once the whole group is gone."""
    pid, worker = start_with_worker(deployment, "sh -c 'trap \"\" TERM; exec sleep 60'", processes)
    wait_until(lambda: Path(f"/proc/{worker}/comm").read_text() == "sleep\n")

    assert stop(deployment, timeout=0.3) == f"killed {pid}"

    assert not running(pid)
    assert not running(worker)


def test_the_workers_of_a_server_that_died_are_named_and_ended_by_the_next_stop(
    deployment: Path, processes: Processes
) -> None:
    """Issue 35: after a crash the API server (the recorded PID) was gone while its workers
    held the GPU memory, and the next deploy was refused for it. Its group is `leftover`
    in the state, and the next stop ends it (the next start finds the memory free)."""
    launch = "sleep 60 &\necho $! > worker.pid\nexit 3\n"  # the leader dies, its worker not
    pid = start(deployment, f"cd {q(str(deployment))}\n{launch}", processes)
    worker_file = deployment / "worker.pid"
    wait_until(lambda: worker_file.is_file() and worker_file.read_text().endswith("\n"))
    worker = int(worker_file.read_text())
    processes.track(worker)
    wait_until(lambda: not running(pid))
    assert os.getpgid(worker) == pid

    assert state(deployment) == ServerState("stopped", pid, leftover=True)
    assert stop(deployment) == f"stopped {pid}"

    wait_until(lambda: not running(worker), timeout=0.5)
    assert state(deployment) == ServerState("none")


def test_a_process_ignoring_sigterm_is_killed_after_the_timeout(
    deployment: Path, processes: Processes
) -> None:
    pid = start(deployment, "trap '' TERM\nexec sleep 60\n", processes)
    wait_until(lambda: Path(f"/proc/{pid}/comm").read_text() == "sleep\n")

    began = time.monotonic()
    assert stop(deployment, timeout=0.3) == f"killed {pid}"

    assert time.monotonic() - began >= 0.3
    assert not running(pid)
    assert not (deployment / "server.pid").exists()


def test_a_reused_pid_is_not_touched(deployment: Path, processes: Processes) -> None:
    stranger = processes.spawn("sleep", "60")
    wait_until(lambda: start_time(stranger.pid) is not None)
    recorded = int(start_time(stranger.pid) or 0) + 1
    (deployment / "server.pid").write_text(f"{stranger.pid} {recorded}\n")

    assert state(deployment) == ServerState("stopped", stranger.pid)
    assert stop(deployment, timeout=0.3) == "none"

    assert stranger.poll() is None and running(stranger.pid)
    assert not (deployment / "server.pid").exists()


def test_a_zombie_counts_as_stopped(deployment: Path, processes: Processes) -> None:
    zombie = processes.spawn("true")
    wait_until(lambda: proc_state(zombie.pid) == "Z")
    (deployment / "server.pid").write_text(f"{zombie.pid} {start_time(zombie.pid)}\n")

    assert state(deployment) == ServerState("stopped", zombie.pid)
    assert stop(deployment) == "none"
    assert proc_state(zombie.pid) == "Z"  # nothing was signalled or waited for


def test_server_state_without_a_pid_file_is_none(tmp_path: Path) -> None:
    assert state(tmp_path) == ServerState("none")


def test_watch_shows_the_server_and_only_the_log_written_since_its_start(
    deployment: Path, processes: Processes
) -> None:
    """A release started again (a rollback to it) appends to its own log; a deployment
    from before per-release logs keeps its one log file as server.log.old."""
    layout = Layout(str(deployment))
    log = deployment / "server.log"
    log.write_text("legacy\n")
    release_log = Path(layout.release_log("r1"))
    release_log.parent.mkdir(parents=True)
    release_log.write_text("".join(f"old {i}\n" for i in range(50)))
    (release_log.parent / "serve.sh").write_text("echo new 0; echo new 1; exec sleep 60\n")
    started = run(start_release(deployment, "r1"))
    assert started.returncode == 0, started.stderr
    pid, log_start = parse_started(started.stdout.decode())
    processes.track(pid)
    assert log_start == len("".join(f"old {i}\n" for i in range(50)))
    assert (deployment / "server.log.old").read_text() == "legacy\n"
    assert os.readlink(log) == "releases/r1/server.log"
    wait_until(lambda: release_log.read_text().endswith("new 1\n"))

    argv = watch_server(layout.server_pid, layout.server_log, log_start, 40)
    frames = parse_frames(run(argv).stdout)
    assert parse_server_state(frames["server"].decode()) == ServerState("running", pid)
    assert frames["tail"] == b"new 0\nnew 1\n"
    one = parse_frames(run(watch_server(layout.server_pid, layout.server_log, log_start, 1)).stdout)
    assert one["tail"] == b"new 1\n"
    missing = parse_frames(
        run(watch_server(str(deployment / "nope.pid"), str(deployment / "nope.log"), 0, 5)).stdout
    )
    assert missing == {"server": b"none\n", "tail": b""}


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("running 31337\n", ServerState("running", 31337)),
        ("stopped 31337\n", ServerState("stopped", 31337)),
        ("stopped 31337 leftover\n", ServerState("stopped", 31337, leftover=True)),
        ("none\n", ServerState("none")),
        ("", ServerState("none")),
    ],
)
def test_server_state(text: str, state: ServerState) -> None:
    assert parse_server_state(text) == state
    assert parse_server_state(text).running == (state.status == "running")
