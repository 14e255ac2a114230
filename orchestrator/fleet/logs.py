"""`orch logs`: the current server log of each container, its last lines or followed.

Following is a bounded read per container every second (container/server.py read_log), each
command starting and ending on its own: nothing is left running on a target when
the follow stops, whatever stopped it. A log that changes under the reader (the
next deploy started a server with its own log) is picked up by its last lines.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.connections import SSH, Connect, Pool
from orchestrator.container.server import LogRead, parse_log_read, read_log
from orchestrator.container.shell import run_step
from orchestrator.contract import run_result
from orchestrator.documents.fleet import ContainerLog, Logs
from orchestrator.errors import OrchError, TransportError
from orchestrator.fanout import READ_PARALLEL, fan_out
from orchestrator.fleet.inputs import Inputs
from orchestrator.layout import Layout
from orchestrator.plan import TargetPlan
from orchestrator.transaction.releases import read_secrets
from orchestrator.transport.base import Transport

READ_LIMIT = 256 * 1024
"""Bytes of log one read brings at most; a follow that falls behind reads again at once."""
POLL_SECONDS = 1.0
NO_LOG = "no server log yet: nothing started here"
READ_TIMEOUT = 30.0

Emit = Callable[[str, str], None]  # (container, line)


@dataclass
class Cursor:
    """Where a container's log has been read to; lines are given out whole."""

    identity: str = ""
    offset: int = 0
    path: str | None = None
    partial: bytes = b""
    found: bool = True

    def take(self, read: LogRead) -> list[str]:
        """The whole lines `read` completes; a new log is announced by its path."""
        lines: list[str] = []
        if read.mode == "none":
            self.found = False
            return lines
        if read.mode == "tail":
            if self.identity:
                lines.append(f"==> {read.path} (a new server log) <==")
            self.partial, self.offset = b"", read.size
        else:
            self.offset += len(read.data)
        self.identity, self.path, self.found = read.identity, read.path, True
        complete, newline, self.partial = (self.partial + read.data).rpartition(b"\n")
        if newline:
            lines += complete.decode("utf-8", "replace").split("\n")
        return lines

    def rest(self) -> list[str]:
        """A last line still without its newline."""
        return [self.partial.decode("utf-8", "replace")] if self.partial else []


def read_once(transport: Transport, layout: Layout, cursor: Cursor, lines: int) -> LogRead:
    """The next part of the log; on a new log, the current release's secret values are
    read first (unrecorded) so that a server printing one shows `***`."""
    argv = read_log(layout.server_log, lines, READ_LIMIT, cursor.identity, cursor.offset)
    read = parse_log_read(
        run_step(transport, argv, "read the server log", timeout=READ_TIMEOUT).stdout
    )
    if read.mode == "tail":
        read_secrets(transport, layout.current)
    return read


@dataclass
class Tail:
    """Each container's last lines, or why there are none."""

    targets: list[ContainerLog] = field(default_factory=list)
    exit_code: int = 0


def _failure(name: str, host: str, exc: OrchError) -> ContainerLog:
    result: Literal["unreachable", "error"] = (
        "unreachable" if isinstance(exc, TransportError) else "error"
    )
    return ContainerLog(
        name=name, host=host, result=result, log=None, lines=[], error=exc.message_for(name)
    )


def tail(connections: Pool, plans: dict[str, TargetPlan], lines: int) -> Tail:
    """The last `lines` lines of each container's current server log."""

    def one(name: str) -> tuple[Cursor, list[str]]:
        cursor = Cursor()
        read = read_once(connections.container(name), plans[name].layout, cursor, lines)
        taken = cursor.take(read)
        return cursor, taken + cursor.rest()

    group = fan_out(list(plans), one, READ_PARALLEL)
    result = Tail()
    for name, plan in plans.items():
        host = plan.host
        if name in group.failed:
            result.targets.append(_failure(name, host, group.failed[name]))
            result.exit_code = max(result.exit_code, group.failed[name].exit_code)
            continue
        cursor, taken = group.succeeded[name]
        found = cursor.found
        result.targets.append(
            ContainerLog(
                name=name,
                host=host,
                result="ok",
                log=cursor.path if found else None,
                lines=taken,
                note=None if found else NO_LOG,
            )
        )
    return result


def follow(
    connections: Pool,
    plans: dict[str, TargetPlan],
    lines: int,
    emit: Emit,
    warn: Emit,
    stop: threading.Event,
) -> None:
    """The last `lines` lines of each log, then what is written to it, until `stop`.
    A container that cannot be read is said once (and again when the reason changes)
    and read again at the next round."""
    cursors = {name: Cursor() for name in plans}
    said: dict[str, str] = {}

    def one(name: str) -> tuple[list[str], bool]:
        """New lines, and whether the read was cut at READ_LIMIT (more is waiting)."""
        cursor = cursors[name]
        read = read_once(connections.container(name), plans[name].layout, cursor, lines)
        return cursor.take(read), len(read.data) >= READ_LIMIT

    while not stop.is_set():
        group = fan_out(list(plans), one, READ_PARALLEL)
        behind = False
        for name in plans:
            if name in group.failed:
                reason = group.failed[name].message_for(name)
            elif not cursors[name].found:
                reason = NO_LOG
            else:
                reason = ""
            if reason and said.get(name) != reason:
                warn(name, reason)
            said[name] = reason
            taken, full = group.succeeded.get(name, ([], False))
            behind = behind or full
            for line in taken:
                emit(name, line)
        if not behind:
            stop.wait(POLL_SECONDS)


def logs(inputs: Inputs, lines: int, connect: Connect = SSH) -> tuple[Logs, int]:
    """`orch logs`: the last `lines` lines of each selected container's server log."""
    plans = {p.container: p for p in inputs.plans}
    with connect(inputs.inventory, None) as connections:
        read = tail(connections, plans, lines)
    result = run_result(read.exit_code)
    document = Logs(playbook=inputs.playbook.name, result=result, targets=read.targets)
    return document, read.exit_code


def follow_logs(
    inputs: Inputs,
    lines: int,
    emit: Emit,
    warn: Emit,
    stop: threading.Event,
    connect: Connect = SSH,
) -> None:
    """`orch logs -f`: each selected container's log followed until `stop`."""
    plans = {p.container: p for p in inputs.plans}
    with connect(inputs.inventory, None) as connections:
        follow(connections, plans, lines, emit, warn, stop)
