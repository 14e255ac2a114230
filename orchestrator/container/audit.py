"""The audit line: one JSON line per run's decision in the container's `audit.log`,
naming the release the run left `current` on. Written, found and parsed here only.

    {"action": "deploy", "current": "9a1f...", "mean_acceptance_length": 4.2,
     "previous_release": "0d3c...", "release": "9a1f...", "result": "deployed",
     "run_id": "...", "time": "2026-12-02T16:40:09+00:00", "user": "ops",
     "verdict": "pass"}

The targets are the record of fleet runs (operators deploy from several machines):
orchestrator/runs.py reads these lines back into runs and `rollback --to` targets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.container.shell import append_line, q
from orchestrator.deadline import now
from orchestrator.transport.base import Transport

AUDIT_TAIL = 5000
"""Audit lines read per container: runs older than this are not listed nor resolved."""

GATED = '"verdict": "'
"""What an audit line with a gate verdict holds: json.dumps writes a null verdict as
`"verdict": null`."""

SUMMARY_KEYS = ("run_id", "time", "action", "result")
GATE_KEYS = ("verdict", "mean_acceptance_length")


# --- write ------------------------------------------------------------------------------


def audit_line(run_id: str, user: str, action: str, target: Mapping[str, Any]) -> str:
    """One JSON line for the container's audit.log: `release` is the release the run
    dealt with, `current` the one it left the container on."""
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


def append(transport: Transport, audit_log: str, line: str) -> None:
    """Best effort: the audit line records a decision already taken."""
    transport.run(append_line(audit_log, line), timeout=60)


# --- find -------------------------------------------------------------------------------


def last_lines(audit_log: str) -> str:
    """sh that prints `audit LINE` (the last audit line) and `gated LINE` (the last with
    a gate verdict: a run that found the release unchanged ran no gate)."""
    return (
        f'echo "audit $(tail -n 1 {q(audit_log)} 2>/dev/null)"\n'
        f'echo "gated $(grep -F {q(GATED)} {q(audit_log)} 2>/dev/null | tail -n 1)"'
    )


def tail(audit_log: str, lines: int) -> str:
    """sh that prints the last `lines` audit lines."""
    return f"tail -n {int(lines)} {q(audit_log)}"


# --- parse ------------------------------------------------------------------------------


def last_run(audit: str, gated: str) -> dict[str, Any] | None:
    """The last run's summary from what last_lines printed (ValueError if not JSON):
    its id, time, action and result, and the figures of the last gate that ran."""
    last = json.loads(audit) if audit else {}
    judged = json.loads(gated) if gated else last
    if not last:
        return None
    return {key: last.get(key) for key in SUMMARY_KEYS} | {
        key: judged.get(key) for key in GATE_KEYS
    }


@dataclass(frozen=True)
class AuditRecord:
    """One audit line: what run `run_id` did on one container."""

    run_id: str
    time: str
    user: str
    action: str
    result: str | None
    release: str | None
    """The release the run dealt with (the new one, or the one rolled back to)."""
    current: str | None
    """The release the run left `current` on; None: nothing serving, or not recorded."""


# Lines written before audit lines recorded `current`: where each outcome left it.
_LEGACY_LEFT_ON = {
    ("deploy", "deployed"): "release",
    ("deploy", "unchanged"): "release",
    ("deploy", "rolled_back"): "previous_release",
    ("rollback", "rolled_back"): "release",
    ("recover", "recovered"): "release",
}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_audit(text: str) -> list[AuditRecord]:
    """The audit log's lines as records, oldest first; a line that is not a run's
    JSON object (a torn write, a hand edit) is left out."""
    records = []
    for line in text.splitlines():
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if not isinstance(raw, dict) or not _text(raw.get("run_id")):
            continue
        action, result = _text(raw.get("action")) or "", _text(raw.get("result"))
        if "current" in raw:
            current = _text(raw["current"])
        else:
            legacy = _LEGACY_LEFT_ON.get((action, result or ""))
            current = _text(raw.get(legacy)) if legacy else None
        records.append(
            AuditRecord(
                run_id=raw["run_id"],
                time=_text(raw.get("time")) or "",
                user=_text(raw.get("user")) or "",
                action=action,
                result=result,
                release=_text(raw.get("release")),
                current=current,
            )
        )
    return records
