"""The lab's hold (lab/hold.py) under a real /bin/sh, as the container sshd's
ForceCommand and the host's `pct exec` run it: a command whose text holds the piece
waits until released, a cut one gets only its first bytes, anything else runs untouched."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.lab import hold
from orchestrator.lab.paths import HostPaths, write_json_atomic, write_pct_launcher

SECONDS = 10.0


@pytest.fixture
def container(tmp_path: Path) -> Path:
    (tmp_path / "lab").mkdir()
    script = tmp_path / "command"
    script.write_text(hold.sshd_command(tmp_path))
    script.chmod(0o755)
    return tmp_path


def ssh_command(container: Path, command: str) -> subprocess.Popen[bytes]:
    """The container's ForceCommand, as sshd starts it for a client's `command`."""
    environment = {**os.environ, "SSH_ORIGINAL_COMMAND": command, "SHELL": "/bin/sh"}
    return subprocess.Popen(
        [str(container / "command")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=environment,
    )


def output(command: subprocess.Popen[bytes]) -> bytes:
    """What the command printed, once it ended (its stdin already closed)."""
    assert command.stdout
    out = command.stdout.read()
    command.wait(timeout=SECONDS)
    return out


def caught(lab_dir: Path) -> tuple[int, str]:
    deadline = time.monotonic() + SECONDS
    while (found := hold.held(lab_dir)) is None:
        assert time.monotonic() < deadline, "the hold caught nothing"
        time.sleep(hold.WAIT_SECONDS)
    return found


def test_a_held_command_waits_until_released_and_then_runs_whole(container: Path) -> None:
    lab_dir = container / "lab"
    hold.hold(lab_dir, "kill -s TERM")
    command = ssh_command(container, "cat; echo ' kill -s TERM ran'")
    assert command.stdin
    command.stdin.write(b"all of it")
    command.stdin.close()

    pid, text = caught(lab_dir)

    assert (pid, text) == (command.pid, "cat; echo ' kill -s TERM ran'")
    time.sleep(0.3)
    assert command.poll() is None  # still held
    hold.release(lab_dir)
    out = output(command)
    assert (command.returncode, out) == (0, b"all of it kill -s TERM ran\n")


def test_a_cut_command_gets_its_first_bytes_and_then_the_end_of_its_stdin(
    container: Path,
) -> None:
    lab_dir = container / "lab"
    hold.hold(lab_dir, "/.journal.json.", cut_after=5)
    command = ssh_command(container, "wc -c # /.journal.json.XXXXXX")
    assert command.stdin
    command.stdin.write(b"0123456789")
    command.stdin.close()

    caught(lab_dir)
    hold.release(lab_dir)

    assert output(command).strip() == b"5"


def test_a_new_hold_lets_the_held_command_go_and_catches_the_next(container: Path) -> None:
    lab_dir = container / "lab"
    hold.hold(lab_dir, "first")
    first = ssh_command(container, "echo first")
    caught(lab_dir)
    hold.hold(lab_dir, "second")
    assert first.communicate(timeout=SECONDS)[0] == b"first\n"
    second = ssh_command(container, "echo second")
    assert caught(lab_dir)[1] == "echo second"
    hold.release(lab_dir)
    assert second.communicate(timeout=SECONDS)[0] == b"second\n"


def test_other_commands_run_as_if_no_hold_were_there(container: Path) -> None:
    hold.hold(container / "lab", "never in it")
    done = ssh_command(container, "printf '%s' \"$0\"")
    assert done.communicate(timeout=SECONDS)[0] == b"/bin/sh"
    assert hold.held(container / "lab") is None


def test_the_hosts_pct_exec_honours_the_same_hold(tmp_path: Path) -> None:
    host = HostPaths(tmp_path / "hosts" / "pve1")
    container = host.container(100)
    write_json_atomic(container.state, {"name": "ct", "vmid": 100, "status": "running"})
    container.lab.mkdir()
    container.rootfs.mkdir()
    write_pct_launcher(host, sys.executable)
    hold.hold(container.lab, "setsid ", cut_after=3)
    argv = [str(host.pct), "exec", "100", "--", "sh", "-c", "wc -c # setsid x"]
    command = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert command.stdin
    command.stdin.write(b"0123456789")
    command.stdin.close()

    assert caught(container.lab)[1] == "sh -c wc -c # setsid x"
    hold.release(container.lab)

    assert output(command).strip() == b"3"
