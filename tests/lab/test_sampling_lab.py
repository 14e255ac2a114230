"""The gate's sampling on the lab: the probes carry it, the stand-in's acceptance follows it
(as vLLM's rejection sampler does), and every verdict records it."""

from __future__ import annotations

import json
from pathlib import Path

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


def test_preflight_warns_when_the_targets_generation_config_samples_otherwise(
    lab: LabHandle,
) -> None:
    """A Qwen3 generation_config.json on the container: the dry run names its defaults
    beside the probes' greedy sampling, as a warning (the dry run still passes)."""
    models = Path(lab.container_vars("ct200")["models_dir"])
    qwen3 = {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95}
    (models / "Qwen3.6-27B" / "generation_config.json").write_text(json.dumps(qwen3))
    code, document, _ = deploy(lab, "--json", "--dry-run")
    assert code == 0, document
    [entry] = document["targets"]
    [finding] = [f for f in entry["findings"] if f["field"] == "gate.probe.sampling"]
    assert finding["severity"] == "warning"
    assert finding["actual"] == {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
    assert "the gate probes at temperature 0 (greedy)" in finding["message"]

    code, document, _ = deploy(
        lab,
        "--json",
        "--dry-run",
        "--set",
        "gate.probe.sampling={temperature: 0.6, top_p: 0.95, top_k: 20}",
    )
    assert code == 0
    assert not [
        f for f in document["targets"][0]["findings"] if f["field"] == "gate.probe.sampling"
    ]
