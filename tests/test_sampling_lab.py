"""The gate's sampling on the lab: the probes carry it, the stand-in's acceptance follows it
(as vLLM's rejection sampler does), and every verdict records it."""

from __future__ import annotations

import pytest
from labtools import FAST, LabHandle

pytestmark = pytest.mark.lab

GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": 0}


def deploy(lab: LabHandle, *args: str) -> tuple[int, dict, str]:
    inventory = str(lab.inventory)
    result = lab.orch("deploy", "qwen-dflash", "-i", inventory, "--limit", "ct200", *FAST, *args)
    return result.code, result.json if "--json" in args else {}, result.stdout


def test_greedy_probes_pass_and_production_temperature_fails_the_same_drafter(
    lab: LabHandle,
) -> None:
    code, greedy, _ = deploy(lab, "--json")
    assert code == 0, greedy
    [entry] = greedy["targets"]
    assert entry["gate"]["verdict"] == "pass"
    assert entry["gate"]["sampling"] == GREEDY
    assert entry["gate"]["per_position_acceptance"][0] > 0.7

    # The same release, probed at temperature 1 with a seed: every probe request carries
    # it, the stand-in accepts as vLLM would at that temperature, and the gate fails.
    hot = ["--set", "gate.probe.sampling={temperature: 1.0, seed: 7}", "--set", "server.port=8001"]
    code, sampled, _ = deploy(lab, "--json", *hot)
    assert code == 1
    [entry] = sampled["targets"]
    assert entry["result"] == "rolled_back"
    assert entry["gate"]["verdict"] == "fail"
    assert entry["gate"]["sampling"] == {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "seed": 7}
    assert 0.4 < entry["gate"]["per_position_acceptance"][0] < 0.55
    assert entry["rollback_gate"]["sampling"] == GREEDY  # the previous release's own gate

    history = lab.orch("history", "--json").json["runs"]
    assert history[0]["targets"][0]["gate"]["sampling"]["temperature"] == 1.0
    assert history[1]["targets"][0]["gate"]["sampling"] == GREEDY
    lab.env["COLUMNS"] = "400"
    shown = lab.orch("history", "-n", "2").stdout
    assert "temperature 1, top_p 1, top_k 0, seed 7" in shown
    assert "temperature 0 (greedy)" in shown


def test_the_run_report_says_what_the_gate_sampled_at(lab: LabHandle) -> None:
    code, _, text = deploy(lab)
    assert code == 0
    assert "probed at temperature 0 (greedy)" in text
