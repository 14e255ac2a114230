"""Each drafter kind deployed end to end on the lab: its published setup passes its gate,
its typical misconfiguration is stopped at preflight and, forced, fails the gate and rolls back."""

from __future__ import annotations

import pytest
from labtools import LabHandle

pytestmark = pytest.mark.lab

FAST = ["--set", "gate.probe.scrape_interval=0.5", "--set", "gate.ready_timeout=30"]
QWEN3_TARGET = "target.path={{ vars.models_dir }}/Qwen3-8B"


def deploy(lab: LabHandle, playbook: str, *args: str) -> tuple[int, dict]:
    result = lab.orch(
        "deploy", playbook, "-i", str(lab.inventory), "--limit", "ct200", "--json", *FAST, *args
    )
    assert result.stdout, result.stderr
    [entry] = result.json["targets"]
    return result.code, entry


def test_eagle3_and_mtp_deploy_and_pass_their_gates(lab: LabHandle) -> None:
    for playbook in ("qwen3-8b-eagle3", "qwen-mtp"):
        code, entry = deploy(lab, playbook)
        assert code == 0, entry
        assert entry["result"] == "deployed"
        assert entry["gate"]["verdict"] == "pass"


def test_mtp_on_a_target_without_mtp_heads_is_stopped_then_rolled_back(lab: LabHandle) -> None:
    code, entry = deploy(lab, "qwen-mtp")
    assert code == 0, entry
    good = entry["release"]
    no_heads = ["--set", QWEN3_TARGET, "--set", "server.tensor_parallel_size=1"]

    code, refused = deploy(lab, "qwen-mtp", *no_heads)
    assert code == 1
    assert refused["result"] == "failed" and "preflight" in refused["error"]
    assert any(
        f["field"] == "drafter.kind" and f["severity"] == "error" for f in refused["findings"]
    )

    code, forced = deploy(lab, "qwen-mtp", "--force", *no_heads)
    assert code == 1
    assert forced["result"] == "rolled_back"
    assert forced["previous_release"] == good
    assert forced["gate"]["verdict"] == "fail"
    assert "MTP" in forced["gate"]["explanation"]
