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
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator import remotejson
from orchestrator.container.shell import append_line, q
from orchestrator.deadline import now
from orchestrator.transport.base import Transport

AUDIT_TAIL = 5000
"""Audit lines read per container: runs older than this are not listed nor resolved."""

STATUS_TAIL = 200
"""Audit lines `orch status` reads to find the gate that admitted the current release."""

SUMMARY_KEYS = ("run_id", "time", "action", "result", "release", "current")
GATE_KEYS = ("verdict", "mean_acceptance_length", "speed")
SPEED_LEVEL_KEYS = (
    "concurrency",
    "requests",
    "per_stream_tokens_per_second",
    "total_tokens_per_second",
    "batch_measured",
    "foreign_share",
    "speedup",
    "verdict",
)
"""What the audit keeps of each speed level: a later gate's reference is read from it."""


# --- write ------------------------------------------------------------------------------


def audit_line(run_id: str, user: str, action: str, target: Mapping[str, Any]) -> str:
    """One JSON line for the container's audit.log: `release` is the release the run
    dealt with, `current` the one it left the container on, `current_gate` the gate
    that judged `current` in this run (the rollback gate after a rollback, a baseline's
    gate of the release it went back to; None when no gate ran on it)."""
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
            "speed": speed_record(gate),
            "current_gate": _gate_of_current(action, target),
            **({"decisions": decisions} if (decisions := target.get("decisions")) else {}),
        },
        sort_keys=True,
    )


def _gate_of_current(action: str, target: Mapping[str, Any]) -> dict[str, Any] | None:
    current = target.get("current")
    if not current:
        return None
    if current == target.get("release"):  # also a start or restart: release == previous
        gate = target.get("gate")
    elif current == target.get("previous_release"):
        # A baseline serves its own release, then gates the one it goes back to.
        gate = target.get("gate") if action == "baseline" else target.get("rollback_gate")
    else:
        gate = None
    return _gate_record(gate) if gate else None


def _gate_record(gate: Mapping[str, Any]) -> dict[str, Any]:
    """A gate's figures as the audit keeps them."""
    return {
        "verdict": gate.get("verdict"),
        "mean_acceptance_length": gate.get("mean_acceptance_length"),
        "speed": speed_record(gate),
    }


def speed_record(gate: Mapping[str, Any]) -> dict[str, Any] | None:
    """The speed phase's verdict and each level's figures (None: no speed phase ran)."""
    speed = gate.get("speed")
    if not isinstance(speed, Mapping):
        return None
    levels = [
        {key: level.get(key) for key in SPEED_LEVEL_KEYS}
        for level in speed.get("levels") or []
        if isinstance(level, Mapping)
    ]
    return {"verdict": speed.get("verdict"), "levels": levels}


def append(transport: Transport, audit_log: str, line: str) -> None:
    """Best effort: the audit line records a decision already taken."""
    transport.run(append_line(audit_log, line), timeout=60)


# --- find -------------------------------------------------------------------------------


def status_lines(audit_log: str) -> str:
    """sh that prints `audit LINE` for each of the last STATUS_TAIL audit lines."""
    return f"tail -n {STATUS_TAIL} {q(audit_log)} 2>/dev/null | sed 's/^/audit /'"


def tail(audit_log: str, lines: int) -> str:
    """sh that prints the last `lines` audit lines."""
    return f"tail -n {int(lines)} {q(audit_log)}"


# --- parse ------------------------------------------------------------------------------


def _lines(lines: list[str]) -> list[dict[str, Any]]:
    """Audit lines as JSON objects; a torn or hand-edited line is left out."""
    parsed = []
    for line in lines:
        try:
            raw = remotejson.loads(line)
        except ValueError:
            continue
        if isinstance(raw, dict) and _well_typed(raw):
            parsed.append(raw)
    return parsed


def _well_typed(raw: Mapping[str, Any]) -> bool:
    """The fields orch reads back have the types it writes (a hand edit may not)."""
    texts = all(isinstance(raw.get(key), str | None) for key in (*SUMMARY_KEYS, "verdict"))
    gate = raw.get("current_gate")
    return (
        texts
        and _is_number(raw.get("mean_acceptance_length"))
        and _well_typed_speed(raw.get("speed"))
        and (
            gate is None
            or (
                isinstance(gate, Mapping)
                and isinstance(gate.get("verdict"), str | None)
                and _is_number(gate.get("mean_acceptance_length"))
                and _well_typed_speed(gate.get("speed"))
            )
        )
    )


def _well_typed_speed(speed: Any) -> bool:
    if speed is None:
        return True
    if not isinstance(speed, Mapping) or not isinstance(speed.get("verdict"), str | None):
        return False
    levels = speed.get("levels") or []
    return isinstance(levels, list) and all(isinstance(level, Mapping) for level in levels)


def _is_number(value: Any) -> bool:
    """None, or a finite number that is not a bool."""
    return value is None or (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    )


def last_run(lines: list[str]) -> dict[str, Any] | None:
    """What the last run did: its id, time, action, result, the release it attempted,
    the one it left current, and its own gate's verdict and mean (None: no gate ran)."""
    parsed = _lines(lines)
    if not parsed:
        return None
    last = parsed[-1]
    return {key: last.get(key) for key in (*SUMMARY_KEYS, *GATE_KEYS)} | {"current": left_on(last)}


def release_gate(lines: list[str], release: str | None) -> dict[str, Any] | None:
    """The gate that admitted `release`: the last run that left it current after
    gating it (`promoted`: the decision that kept it after its gate paused). None when
    no recorded run gated it (a switch cut short, a hand edit). Lines from before
    `current_gate` was recorded count when the run's gate judged the release it left
    current."""
    if not release:
        return None
    for raw in reversed(_lines(lines)):
        if left_on(raw) != release:
            continue
        if "current_gate" in raw:
            gate = raw["current_gate"]
        else:
            gate = raw if raw.get("release") == release and raw.get("verdict") else None
        if gate:
            return {
                "run_id": raw.get("run_id"),
                "time": raw.get("time"),
                "result": gate.get("verdict"),
                "mean_acceptance_length": gate.get("mean_acceptance_length"),
                "speed": gate.get("speed"),
                **({"promoted": promoted} if (promoted := _promotion(raw)) else {}),
            }
    return None


def _promotion(raw: Mapping[str, Any]) -> Any:
    """The decision that kept the run's release after its gate paused, if one did."""
    decisions = raw.get("decisions")
    last = decisions[-1] if isinstance(decisions, list) and decisions else None
    return last if isinstance(last, Mapping) and last.get("choice") == "promote" else None


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


def left_on(raw: Mapping[str, Any]) -> str | None:
    """The release an audit line's run left current (older lines: read from its outcome)."""
    if "current" in raw:
        return _text(raw["current"])
    legacy = _LEGACY_LEFT_ON.get((_text(raw.get("action")) or "", _text(raw.get("result")) or ""))
    return _text(raw.get(legacy)) if legacy else None


def parse_audit(text: str) -> list[AuditRecord]:
    """The audit log's lines as records, oldest first; a line that is not a run's
    JSON object (a torn write, a hand edit) is left out."""
    records = []
    for raw in _lines(text.splitlines()):
        if not _text(raw.get("run_id")):
            continue
        action, result = _text(raw.get("action")) or "", _text(raw.get("result"))
        current = left_on(raw)
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
