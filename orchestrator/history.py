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
from orchestrator.errors import InputError, NeedsAttention

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

    def _insert(self, document: dict[str, Any], command: str, user: str) -> None:
        with closing(self._connect()) as db, db:
            db.execute(
                "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
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

    def last(
        self,
        limit: int,
        playbook: str | None = None,
        since: datetime | None = None,
        inventory: Path | None = None,
    ) -> list[dict[str, Any]]:
        """The newest runs first, each as recorded plus who ran what; only those of
        `playbook`, started at or after `since`, or run on `inventory` (the file, by its
        absolute path; runs recorded before runs named their inventory have none)."""
        if not self.path.exists():
            return []
        where, values = ["1"], []
        if playbook is not None:
            where.append("playbook = ?")
            values.append(playbook)
        if since is not None:
            where.append("started >= ?")
            values.append(since.astimezone(UTC).isoformat(timespec="seconds"))
        if inventory is not None:
            where.append("json_extract(document, '$.inventory') = ?")
            values.append(str(inventory.resolve()))
        with closing(self._connect()) as db:
            rows = db.execute(
                f"SELECT user, command, document FROM runs WHERE {' AND '.join(where)} "
                "ORDER BY started DESC, rowid DESC LIMIT ?",
                (*values, limit),
            ).fetchall()
        return [_run(*row) for row in rows]

    def find(self, run_id: str) -> dict[str, Any]:
        """The run with this id, or the one run whose id starts with it."""
        rows = []
        if self.path.exists():
            with closing(self._connect()) as db:
                rows = db.execute(
                    "SELECT user, command, document FROM runs WHERE run_id = ? "
                    "UNION SELECT user, command, document FROM runs "
                    "WHERE substr(run_id, 1, length(?)) = ? LIMIT 3",
                    (run_id, run_id, run_id),
                ).fetchall()
        runs = [_run(*row) for row in rows]
        exact = [run for run in runs if run["run_id"] == run_id]
        if exact or len(runs) == 1:
            return (exact or runs)[0]
        if not runs:
            raise InputError(f"run {run_id!r}: not in the local history ({self.path})")
        ids = ", ".join(run["run_id"] for run in runs)
        raise InputError(f"run {run_id!r} is ambiguous: {ids}...")

    def run_ids(self, limit: int = 200) -> list[tuple[str, str]]:
        """(run id, playbook) of the newest runs, for completion."""
        if not self.path.exists():
            return []
        with closing(self._connect()) as db:
            return db.execute(
                "SELECT run_id, playbook FROM runs ORDER BY started DESC LIMIT ?", (limit,)
            ).fetchall()


def _run(user: str, command: str, document: str) -> dict[str, Any]:
    return {**json.loads(document), "user": user, "command": command}


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
