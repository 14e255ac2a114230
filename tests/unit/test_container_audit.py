"""The audit line as written: one JSON object with the gate figures."""

from __future__ import annotations

import json

from orchestrator.container.audit import audit_line


def test_audit_line_is_one_json_object_with_the_gate_figures() -> None:
    line = audit_line(
        "r1",
        "alice",
        "deploy",
        {
            "result": "rolled_back",
            "release": "a",
            "previous_release": "b",
            "current": "b",
            "gate": {"verdict": "fail", "mean_acceptance_length": 1.1},
        },
    )
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["action"], entry["verdict"], entry["mean_acceptance_length"]) == (
        "deploy",
        "fail",
        1.1,
    )
    assert (entry["release"], entry["current"]) == ("a", "b")  # tried a, left b current
