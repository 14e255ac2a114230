"""What happened on one container in a deploy or rollback run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.drafters.findings import Finding
from orchestrator.gate import GateReport


@dataclass
class Outcome:
    """What happened on one container; `result` is the contract of --json."""

    name: str
    host: str
    result: str = "failed"
    release: str | None = None
    previous_release: str | None = None
    server_version: str | None = None
    gate: GateReport | None = None
    rollback_gate: GateReport | None = None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    exit_code: int = 0
    diff: str | None = None  # with --diff: `diff -u` of current vs new ("" = no change)
    changes: str | None = None
    """The same diff, read on every deploy: kept in the local history for `orch report`."""
    steps: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    recovered: dict[str, Any] | None = None
    current: str | None = None  # the release `current` points at when the run ends
    replaced: dict[str, Any] | None = None
    """With `deploy --replace`: the other playbook's server it stopped, and what became of it."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "host": self.host,
            "result": self.result,
            "release": self.release,
            "previous_release": self.previous_release,
            "server_version": self.server_version,
            "gate": self.gate.to_dict() if self.gate else None,
            "rollback_gate": self.rollback_gate.to_dict() if self.rollback_gate else None,
            "findings": [f.to_dict() for f in self.findings],
            "error": self.error,
            "steps": {k: round(v, 3) for k, v in self.steps.items()},
            "notes": self.notes,
            "recovered": self.recovered,
            "current": self.current,
            **({"diff": self.diff} if self.diff is not None else {}),
            **({"replaced": self.replaced} if self.replaced is not None else {}),
        }
