"""Where runs are remembered on this machine: the local history (SQLite) and where it lives."""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.contract import KEEP_CHANGES, jsonable
from orchestrator.documents.history import RecordedRun
from orchestrator.errors import InputError, NeedsAttention
from orchestrator.secrets import mask_document
from orchestrator.settings import state_dir

if TYPE_CHECKING:
    from orchestrator.documents.runs import InterruptedRun, Run
    from orchestrator.documents.tune import Tune

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


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(3).hex()


class History:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_dir() / "history.sqlite"

    def _connect(self) -> sqlite3.Connection:
        """The database, only its owner may read it (0600): its rows hold what the runs
        read from servers. SQLite gives its journal files the database's mode."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o600))
        os.chmod(self.path, 0o600)
        connection = sqlite3.connect(self.path)
        connection.execute(SCHEMA)
        return connection

    def record(self, document: Run | InterruptedRun | Tune, command: str, user: str) -> None:
        try:
            self._insert(document, command, user)
        except (sqlite3.Error, OSError) as exc:
            raise NeedsAttention(f"could not record the run in {self.path}: {exc}") from None

    def record_if_missing(self, document: InterruptedRun, command: str, user: str) -> None:
        """A run known only from a container's records (it died before writing its
        own row): added once, never over the run's own row."""
        try:
            self._insert(document, command, user, "INSERT OR IGNORE")
        except (sqlite3.Error, OSError) as exc:
            raise NeedsAttention(f"could not record the run in {self.path}: {exc}") from None

    def _insert(
        self,
        document: Run | InterruptedRun | Tune,
        command: str,
        user: str,
        verb: str = "INSERT OR REPLACE",
    ) -> None:
        """A deploy's targets keep the diff of the files they read (`orch report`)."""
        recorded = jsonable(document, KEEP_CHANGES if document.kind == "DeployRun" else None)
        with closing(self._connect()) as db, db:
            db.execute(
                f"{verb} INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    document.run_id,
                    document.started,
                    user,
                    command,
                    document.playbook,
                    document.result,
                    json.dumps(mask_document(recorded)),
                ),
            )

    def last(
        self,
        limit: int,
        playbook: str | None = None,
        since: datetime | None = None,
        inventory: Path | None = None,
        container: str | None = None,
    ) -> list[RecordedRun]:
        """The newest runs first, each as recorded plus who ran what; only those of
        `playbook`, started at or after `since`, run on `inventory` (the file, by its
        absolute path; runs recorded before runs named their inventory have none), or
        with `container` among their targets. A
        store that cannot be read (full disk, not a database, a row that is not JSON) is
        an error naming it, never a traceback."""
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
        if container is not None:
            where.append(
                "EXISTS (SELECT 1 FROM json_each(document, '$.targets') "
                "WHERE json_extract(value, '$.name') = ?)"
            )
            values.append(container)
        return self._runs(
            f"SELECT user, command, document FROM runs WHERE {' AND '.join(where)} "
            "ORDER BY started DESC, rowid DESC LIMIT ?",
            (*values, limit),
        )

    def _runs(self, query: str, values: tuple[object, ...]) -> list[RecordedRun]:
        """The rows `query` selects, as runs. A store that cannot be read (not a database,
        a directory, a table or row doctored by hand) is an error naming it (exit 3)."""
        try:
            with closing(self._connect()) as db:
                rows = db.execute(query, values).fetchall()
            return [_run(*row) for row in rows]
        except (sqlite3.Error, OSError, ValueError, TypeError) as exc:
            raise NeedsAttention(f"cannot read the history {self.path}: {exc}") from None

    def find(self, run_id: str) -> RecordedRun:
        """The run with this id, or the one run whose id starts with it."""
        runs = []
        if self.path.exists():
            runs = self._runs(
                "SELECT user, command, document FROM runs WHERE run_id = ? "
                "UNION SELECT user, command, document FROM runs "
                "WHERE substr(run_id, 1, length(?)) = ? LIMIT 3",
                (run_id, run_id, run_id),
            )
        exact = [run for run in runs if run.run_id == run_id]
        if exact or len(runs) == 1:
            return (exact or runs)[0]
        if not runs:
            raise InputError(f"run {run_id!r}: not in the local history ({self.path})")
        ids = ", ".join(run.run_id for run in runs)
        raise InputError(f"run {run_id!r} is ambiguous: {ids}...")

    def run_ids(self, limit: int = 200) -> list[tuple[str, str]]:
        """(run id, playbook) of the newest runs, for completion."""
        if not self.path.exists():
            return []
        try:
            with closing(self._connect()) as db:
                return db.execute(
                    "SELECT run_id, playbook FROM runs ORDER BY started DESC LIMIT ?", (limit,)
                ).fetchall()
        except (sqlite3.Error, OSError):
            return []  # completion offers nothing rather than fail


def _run(user: str, command: str, document: str) -> RecordedRun:
    """A row as its run: the document recorded, and who ran it with which command."""
    return RecordedRun.model_validate({**json.loads(document), "user": user, "command": command})


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
