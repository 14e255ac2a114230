"""Where a deployment stands on its container, read in one round trip: the current
release, the recorded server (and, when its process is gone, its log's last line),
the lock's owner and the last run's audit line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.container import audit
from orchestrator.container.shell import PROCESS_FUNCTIONS, builder, q, reading, script
from orchestrator.container.store import release_id_of
from orchestrator.layout import Layout
from orchestrator.transport.base import Transport

TIMEOUT = 60.0
LOG_END_BYTES = 2048
"""How much of a gone server's log is read for its last line."""


@builder
def status_report(layout: Layout) -> list[str]:
    """`key value` lines: current release (and `dangling yes` when its dir is gone),
    server state (and `log_end LINE`, its log's last line, when its recorded process is
    gone), lock owner, then the audit log's last lines (`audit LINE` each)."""
    return script(
        PROCESS_FUNCTIONS
        + f'echo "current $(readlink {q(layout.current)} 2>/dev/null)"\n'
        + f'[ -L {q(layout.current)} ] && [ ! -d {q(layout.current)} ] && echo "dangling yes"\n'
        + f'_server=$(recorded {q(layout.server_pid)}); echo "server $_server"\n'
        + "case $_server in stopped*) printf 'log_end %s\\n' \"$("
        + f'tail -c {LOG_END_BYTES} {q(layout.server_log)} 2>/dev/null | tail -n 1)";; esac\n'
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
    log_end: str | None = None
    """The server log's last line, read when the recorded process is gone."""


def parse_status_report(text: str) -> StatusReport:
    """What status_report prints, as a status row."""
    with reading("the status report", text):
        # Lines end at "\n" only: a log line's "\r" or form feed starts no key of its own.
        pairs = [line.partition(" ")[::2] for line in text.split("\n") if line]
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
            log_end=fields.get("log_end") or None,
        )


def read_status(transport: Transport, layout: Layout) -> StatusReport:
    return parse_status_report(transport.run(status_report(layout), timeout=TIMEOUT).text)
