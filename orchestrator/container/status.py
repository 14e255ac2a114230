"""Where a deployment stands on its container, read in one round trip: the current
release, the recorded server, the lock's owner and the last run's audit line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.container import audit
from orchestrator.container.shell import PROCESS_FUNCTIONS, builder, q, reading, script
from orchestrator.container.store import release_id_of
from orchestrator.layout import Layout
from orchestrator.transport.base import Transport

TIMEOUT = 60.0


@builder
def status_report(layout: Layout) -> list[str]:
    """`key value` lines: current release (and `dangling yes` when its dir is gone),
    server state, lock owner, then the audit log's last lines (`audit LINE` each)."""
    return script(
        PROCESS_FUNCTIONS
        + f'echo "current $(readlink {q(layout.current)} 2>/dev/null)"\n'
        + f'[ -L {q(layout.current)} ] && [ ! -d {q(layout.current)} ] && echo "dangling yes"\n'
        + f'echo "server $(recorded {q(layout.server_pid)})"\n'
        + f'echo "lock $(cat {q(layout.lock_owner)} 2>/dev/null)"\n'
        + audit.status_lines(layout.audit_log)
    )


@dataclass(frozen=True)
class StatusReport:
    """What status_report prints, as one status row."""

    release: str | None
    """The release `current` points at; None: nothing deployed."""
    release_missing: bool
    """`current` names a release whose dir is gone."""
    server: str
    """`running`, `stopped` or `none`, as `recorded` prints it."""
    pid: int | None
    release_gate: dict[str, Any] | None
    """audit.release_gate's: the audit log's words, as orch wrote them."""
    last_run: dict[str, Any] | None
    """audit.last_run's: the audit log's words, as orch wrote them."""
    lock: str | None
    """The lock's owner file, as it is."""


def parse_status_report(text: str) -> StatusReport:
    """What status_report prints, as a status row."""
    with reading("the status report", text):
        pairs = [line.partition(" ")[::2] for line in text.splitlines()]
        fields = {key: value for key, value in pairs if key != "audit"}
        audit_lines = [value for key, value in pairs if key == "audit"]
        server = fields.get("server", "none").split()
        release = release_id_of(fields.get("current", ""))
        return StatusReport(
            release=release,
            release_missing=fields.get("dangling") == "yes",
            server=server[0],
            pid=int(server[1]) if len(server) > 1 else None,
            release_gate=audit.release_gate(audit_lines, release),
            last_run=audit.last_run(audit_lines),
            lock=fields.get("lock") or None,
        )


def read_status(transport: Transport, layout: Layout) -> StatusReport:
    return parse_status_report(transport.run(status_report(layout), timeout=TIMEOUT).text)
