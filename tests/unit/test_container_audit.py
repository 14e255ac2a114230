"""The audit line as written: one JSON object with the gate figures."""

from __future__ import annotations

import json

from orchestrator.container.audit import audit_line, release_gate


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


def test_a_baselines_gate_of_the_release_it_went_back_to_is_that_releases_gate() -> None:
    """`orch baseline` serves `baseline-...`, then gates the release it goes back to
    against it: status shows that gate, with its speedups, as the release's."""
    speed = {"verdict": "pass", "levels": [{"concurrency": 1, "speedup": {"mean": 4.0}}]}
    target = {
        "result": "measured",
        "release": "baseline-3385b92cd97f",
        "previous_release": "r1",
        "current": "r1",
        "gate": {"verdict": "pass", "mean_acceptance_length": 4.0, "speed": speed},
    }
    older = audit_line("run1", "ops", "deploy", {**target, "release": "r1", "gate": None})
    line = audit_line("run2", "ops", "baseline", target)
    gate = release_gate([older, line], "r1")
    assert gate is not None
    assert (gate["run_id"], gate["result"]) == ("run2", "pass")
    assert gate["speed"]["levels"][0]["speedup"] == {"mean": 4.0}
    rollback = audit_line("run3", "ops", "deploy", {**target, "release": "r2"})
    assert json.loads(rollback)["current_gate"] is None  # a deploy's gate judged r2
