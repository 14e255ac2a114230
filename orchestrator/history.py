"""Where runs are remembered on this machine: the local history (SQLite) and where it lives."""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.deadline import now
from orchestrator.documents import document
from orchestrator.errors import NeedsAttention

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    started TEXT NOT NULL,
    user TEXT NOT NULL,
    command TEXT NOT NULL,
    playbook TEXT NOT NULL,
    result TEXT NOT NULL,
    document TEXT NOT NULL
)
"""


def state_dir() -> Path:
    """$ORCH_STATE_DIR, else $XDG_STATE_HOME/orch, else ~/.local/state/orch."""
    if explicit := os.environ.get("ORCH_STATE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "orch"


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(3).hex()


class History:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_dir() / "history.sqlite"

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path)
        connection.execute(SCHEMA)
        return connection

    def record(self, document: dict[str, Any], command: str, user: str) -> None:
        try:
            self._insert(document, command, user)
        except (sqlite3.Error, OSError) as exc:
            raise NeedsAttention(f"could not record the run in {self.path}: {exc}") from None

    def record_if_missing(self, document: dict[str, Any], command: str, user: str) -> None:
        """A run known only from a container's records (it died before writing its
        own row): added once, never over the run's own row."""
        try:
            self._insert(document, command, user, "INSERT OR IGNORE")
        except (sqlite3.Error, OSError) as exc:
            raise NeedsAttention(f"could not record the run in {self.path}: {exc}") from None

    def _insert(
        self, document: dict[str, Any], command: str, user: str, verb: str = "INSERT OR REPLACE"
    ) -> None:
        with closing(self._connect()) as db, db:
            db.execute(
                f"{verb} INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    document["run_id"],
                    document.get("started", now()),
                    user,
                    command,
                    document["playbook"],
                    document["result"],
                    json.dumps(document),
                ),
            )

    def last(self, limit: int) -> list[dict[str, Any]]:
        """The newest runs first, each as recorded plus who ran what. A store that
        cannot be read (full disk, not a database, a row that is not JSON) is an error
        naming it, never a traceback."""
        if not self.path.exists():
            return []
        try:
            with closing(self._connect()) as db:
                rows = db.execute(
                    "SELECT user, command, document FROM runs ORDER BY started DESC, rowid DESC "
                    "LIMIT ?",
                    (limit,),
                ).fetchall()
            return [
                {**json.loads(doc), "user": user, "command": command} for user, command, doc in rows
            ]
        except (sqlite3.Error, OSError, ValueError, TypeError) as exc:
            raise NeedsAttention(f"cannot read the history {self.path}: {exc}") from None


ROOM_NEEDED = 16 * 1024 * 1024
"""Free bytes the state dir needs before a run changes anything: its log and history row."""


def check_writable(directory: Path | None = None) -> None:
    """The local record before the fleet: the state dir exists, takes a file, and has
    room for the run's log and history row; else NeedsAttention, nothing touched."""
    directory = directory or state_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".writable-{os.getpid()}"
        probe.write_bytes(b"x")
        probe.unlink()
        free = os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize
    except OSError as exc:
        raise NeedsAttention(
            f"the state dir {directory} cannot be written ({exc.strerror or exc}): "
            "nothing was changed; the run's record would be lost (ORCH_STATE_DIR chooses another)"
        ) from None
    if free < ROOM_NEEDED:
        raise NeedsAttention(
            f"the state dir {directory} has {free // 1024} KiB free, "
            f"{ROOM_NEEDED // 1024 // 1024} MiB needed for the run's record: nothing was changed"
        )


def history_document(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """`orch history --json`: the runs, newest first, each as it was recorded (its own
    envelope dropped; result words of older records in today's vocabulary)."""
    return document(
        "History",
        runs=[
            {
                **{k: v for k, v in run.items() if k not in ("kind", "api_version")},
                "result": run["result"].replace(" ", "_"),
            }
            for run in runs
        ],
    )
