"""Each drafter kind deployed end to end on the lab: its published setup passes its gate,
its typical misconfiguration is stopped at preflight and, forced, fails the gate and rolls back."""

from __future__ import annotations

import pytest
from labtools import FAST, LabHandle

pytestmark = pytest.mark.lab

QWEN3_TARGET = "target.path='{{ vars.models_dir }}/Qwen3-8B'"


def deploy(lab: LabHandle, playbook: str, *args: str, limit: str = "ct200") -> tuple[int, dict]:
    result = lab.orch(
        "deploy", playbook, "-i", str(lab.inventory), "--limit", limit, "--json", *FAST, *args
    )
    assert result.stdout, result.stderr
    [entry] = result.json["targets"]
    return result.code, entry


def test_eagle3_and_mtp_deploy_and_pass_their_gates(lab: LabHandle) -> None:
    # one server per container: each playbook on its own
    for playbook, container in (("qwen3-8b-eagle3", "ct200"), ("qwen-mtp", "ct201")):
        code, entry = deploy(lab, playbook, limit=container)
        assert code == 0, (entry.get("error"), entry.get("findings"))
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


def test_an_eagle3_head_on_another_target_is_stopped_then_rolled_back(lab: LabHandle) -> None:
    code, entry = deploy(lab, "qwen3-8b-eagle3")
    assert code == 0, entry
    good = entry["release"]
    other = ["--set", "target.path='{{ vars.models_dir }}/Qwen3.6-27B'"]

    code, refused = deploy(lab, "qwen3-8b-eagle3", *other)
    assert code == 1
    errors = {f["field"] for f in refused["findings"] if f["severity"] == "error"}
    assert {"target_hidden_size", "transformer_layer_config.vocab_size"} <= errors

    code, forced = deploy(lab, "qwen3-8b-eagle3", "--force", *other)
    assert code == 1
    assert (forced["result"], forced["previous_release"]) == ("rolled_back", good)
    assert forced["gate"]["per_position_acceptance"][0] < 0.2
    assert "eagle_aux_hidden_state_layer_ids" in forced["gate"]["explanation"]
