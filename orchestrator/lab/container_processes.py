"""Every process started in a lab container, found without the stand-ins' records, and
ended by PID: what a real `pct stop` does to a container's processes.

A real container's processes share its cgroup; the lab (no root) has none to give. Its
mark is the environment instead: `pct exec` and the sshd of a directly reached
container put ORCH_LAB_CONTAINER=<the container's directory> into every command they
start, and a process's initial environment (/proc/PID/environ) is inherited by
everything it starts, through `setsid`, a double fork or a re-parenting to PID 1, which
the session, the process group and the parent chain are not: orch starts its server in
a session of its own, and vLLM's engine processes outlive a killed parent. A process
would lose the mark only by starting another with an emptied environment (`env -i`),
which orch's launch does not (templates/vllm/serve.sh.j2 exports into the environment
it was given), and real vLLM 0.32.0's engine process carries it
(tests/lab/test_lab.py). The working directory is no mark: a server may leave it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from orchestrator.lab.paths import CONTAINER_ENV, pid_alive, process_start
from orchestrator.lab.realserver import shm_in_use


@dataclass(frozen=True)
class Resident:
    """A process started in a lab container: its PID, and its start time so that a PID
    reused meanwhile is never signalled."""

    pid: int
    start: int

    def alive(self) -> bool:
        return pid_alive(self.pid) and process_start(self.pid) == self.start


def mark(root: Path | str) -> str:
    """The environment entry of every process started in the container at `root`."""
    return f"{CONTAINER_ENV}={os.path.realpath(root)}"


def _container_of(environment: bytes) -> str | None:
    """The container directory a process's environment names, resolved; None: none."""
    prefix = f"{CONTAINER_ENV}=".encode()
    for item in environment.split(b"\0"):
        if item.startswith(prefix):
            return os.path.realpath(os.fsdecode(item[len(prefix) :]))
    return None


def started_in(roots: Collection[Path | str]) -> list[Resident]:
    """The live processes marked as started in one of the containers at `roots` (this
    process aside), read from /proc."""
    wanted = {os.path.realpath(root) for root in roots}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        try:
            environment = (entry / "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        start = process_start(pid)
        if start is not None and _container_of(environment) in wanted and pid_alive(pid):
            found.append(Resident(pid, start))
    return sorted(found, key=lambda r: r.pid)


def end(residents: list[Resident], grace: float) -> list[int]:
    """SIGTERM each by PID, SIGKILL those still there after `grace` seconds, then remove
    the /dev/shm files they held (vLLM's shared memory outlives a killed server).
    Returns the PIDs signalled."""
    shm = shm_in_use([r.pid for r in residents])
    signalled = []
    for resident in residents:
        with contextlib.suppress(ProcessLookupError):
            if resident.alive():
                os.kill(resident.pid, signal.SIGTERM)
                signalled.append(resident.pid)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(r.alive() for r in residents):
        time.sleep(0.05)
    for resident in residents:
        with contextlib.suppress(ProcessLookupError):
            if resident.alive():
                os.kill(resident.pid, signal.SIGKILL)
    for path in shm:
        path.unlink(missing_ok=True)
    return signalled


def end_all(roots: Collection[Path | str], grace: float) -> list[int]:
    """Every process started in the containers at `roots`, ended; processes started
    meanwhile by those ending are looked for again, until none is left."""
    signalled: list[int] = []
    for _ in range(3):
        residents = started_in(roots)
        if not residents:
            break
        signalled += end(residents, grace)
    return signalled
