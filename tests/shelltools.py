"""Running built scripts for real: locally under /bin/sh, argv exactly as built (never
through another shell), and the processes a test starts, killed by PID and start time
at its end (the `processes` fixture in conftest.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "commands"
HOSTILE_NAMES = [
    "it's $(touch pwned).json",
    "a;touch pwned;b",
    "`touch pwned`",
    'say "hi" & touch pwned',
    "*",
    "-rf",
    "tab\there $HOME",
]


def run(
    argv: list[str], stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, input=stdin, capture_output=True, cwd=cwd, timeout=30, check=False)


def tree(root: Path) -> set[str]:
    """Every path under `root`, relative, links not followed."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat, or None when there is no such process."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat_line.rsplit(")", 1)[1].split()[19]


def proc_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def running(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z", "X")


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {condition}")
        time.sleep(0.01)


class Processes:
    """The processes a test started, killed at the end by PID (if the start time still matches)."""

    def __init__(self) -> None:
        self.recorded: list[tuple[int, str | None]] = []
        self.children: list[subprocess.Popen[bytes]] = []

    def track(self, pid: int) -> None:
        self.recorded.append((pid, start_time(pid)))

    def spawn(self, *argv: str) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(argv)
        self.children.append(child)
        return child

    def cleanup(self) -> None:
        for pid, started in self.recorded:
            if started is not None and start_time(pid) == started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for child in self.children:
            child.kill()
            child.wait(timeout=10)


def captured(name: str) -> str:
    return (FIXTURES / name).read_text()


def frame(name: str, data: bytes) -> bytes:
    return f"{name} {len(data)}\n".encode() + data
