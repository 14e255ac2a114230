"""Where runs are remembered: local history (SQLite) and each target's audit log."""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


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

    def last(self, limit: int) -> list[dict[str, Any]]:
        """The newest runs first, each as recorded plus who ran what."""
        if not self.path.exists():
            return []
        with closing(self._connect()) as db:
            rows = db.execute(
                "SELECT user, command, document FROM runs ORDER BY started DESC, rowid DESC "
                "LIMIT ?",
                (limit,),
            ).fetchall()
        return [
            {**json.loads(doc), "user": user, "command": command} for user, command, doc in rows
        ]


def audit_line(run_id: str, user: str, action: str, target: dict[str, Any]) -> str:
    """One JSON line for the container's audit.log: `release` is the release the run
    dealt with, `current` the one it left the container on (see orchestrator/runs.py)."""
    gate = target.get("gate") or {}
    return json.dumps(
        {
            "time": now(),
            "run_id": run_id,
            "user": user,
            "action": action,
            "result": target.get("result"),
            "release": target.get("release"),
            "previous_release": target.get("previous_release"),
            "current": target.get("current"),
            "verdict": gate.get("verdict"),
            "mean_acceptance_length": gate.get("mean_acceptance_length"),
        },
        sort_keys=True,
    )
