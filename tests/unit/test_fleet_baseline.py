"""`orch baseline`'s fleet body on scripted containers: its document (BaselineRun) keeps
the JSON contract, each container in the rollout's order, recorded in the history."""

from __future__ import annotations

from pathlib import Path

import pytest
from fleets import FAST, Fleet, by_name, checked

from orchestrator.cancel import Cancel
from orchestrator.fleet.baseline import baseline
from orchestrator.history import History
from orchestrator.progress import no_progress
from orchestrator.transaction.options import Options


def test_a_baseline_beside_nothing_serving_changes_nothing_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path / "state"))
    fleet = Fleet(*FAST)
    options = Options(run_id="20261204T100000Z-dddddd", user="ops")

    printed, code = baseline(fleet.inputs, options, fleet.connect, no_progress, Cancel())

    document = checked(printed, "BaselineRun")
    assert (code, document["result"]) == (2, "bad_input")
    first, *rest = document["targets"]  # the canary refused: the rest not started
    assert "no gated release serving here" in first["error"]
    assert [t["result"] for t in rest] == ["skipped"] * len(rest)
    for name, target in by_name(document).items():
        assert "baseline" not in target and "speed" not in target  # only when measured
        assert fleet.containers[name].server is None
    assert document["run_id"] in {row.run_id for row in History().last(5, None, None, None)}
