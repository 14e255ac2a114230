"""Rows of the local history as some version of orch wrote them: tests that read the
history back start from the recorded JSON, not from the models that write it today."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from typing import Any

from orchestrator.history import SCHEMA, History


def record_json(history: History, document: dict[str, Any], command: str, user: str) -> None:
    """`document` stored as `history` stores a run."""
    history.path.parent.mkdir(parents=True, exist_ok=True)
    row = (document["run_id"], document["started"], user, command, document["playbook"])
    with closing(sqlite3.connect(history.path)) as db, db:
        db.execute(SCHEMA)
        db.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*row, document["result"], json.dumps(document)),
        )
