"""`orch baseline` end to end on the stand-in lab: real sshd, pct and vLLM stand-ins."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from labdeploy import deploy, serving_pid, target
from labtools import FAST, LabHandle
from orchrun import ROOT

pytestmark = pytest.mark.lab

K2 = ["--set", "server.num_speculative_tokens=2", "--set", "gate.min_mean_acceptance_length=2"]
"""Two drafted positions: the lab's drafter accepts about 2.45 tokens a step there."""


def test_a_baseline_then_a_deploy_judges_speedup_against_it(lab: LabHandle) -> None:
    code, first = deploy(lab, "--limit", "ct200")
    assert code == 0, first
    gated = target(first, "ct200")["current"]

    result = lab.orch(
        "baseline", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct200", "--json", *FAST
    )
    assert result.code == 0, result.stdout + result.stderr
    measured = target(result.json, "ct200")
    assert (measured["result"], measured["current"]) == ("measured", gated)
    assert [lv["concurrency"] for lv in measured["baseline"]["levels"]] == [1, 8]
    recorded = json.loads((lab.deployment_dir("ct200") / "baseline.json").read_text())
    assert recorded == measured["baseline"]
    assert measured["gate"]["speed"]["reference"]["kind"] == "baseline"  # gated again
    releases = sorted(p.name for p in (lab.deployment_dir("ct200") / "releases").iterdir())
    assert releases == [gated]  # the baseline's own directory is pruned
    assert (lab.deployment_dir("ct200") / "current").resolve().name == gated

    code, second = deploy(lab, "--limit", "ct200", *K2)
    gate = target(second, "ct200")["gate"]
    assert gate["speed"], json.dumps(target(second, "ct200"))[:3000]
    speed = gate["speed"]
    assert speed["reference"] and speed["reference"]["kind"] == "baseline", speed["reason"]
    assert "fingerprint matches" in speed["reason"]
    for level in speed["levels"]:
        assert level["speedup"]["mean"] > 0, level


def test_a_sigint_while_measuring_the_baseline_ends_on_the_gated_release(lab: LabHandle) -> None:
    code, first = deploy(lab, "--limit", "ct200")
    assert code == 0, first
    gated = target(first, "ct200")["current"]
    args = ["baseline", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct200", *FAST]
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=lab.env,
        cwd=ROOT,
    )
    assert process.stderr
    for line in process.stderr:  # progress: one line per step off a terminal
        if line.rstrip().endswith("ct200: baseline speed"):
            process.send_signal(signal.SIGINT)
            break
    out, _ = process.communicate(timeout=300)

    assert process.returncode == 130, out
    deployment = lab.deployment_dir("ct200")
    assert (deployment / "current").resolve().name == gated
    assert not (deployment / "journal.json").exists()
    assert not (deployment / "baseline.json").exists()
    assert sorted(p.name for p in (deployment / "releases").iterdir()) == [gated]
    status = lab.orch("status", "qwen-dflash", "-i", str(lab.inventory), "-l", "ct200", "--json")
    assert status.json["targets"][0]["state"] == "serving", status.stdout
    assert status.json["targets"][0]["release"] == gated
    assert serving_pid(lab, "ct200") > 0


def test_a_baseline_measured_on_other_gpus_is_no_reference(lab: LabHandle) -> None:
    """The container's nvidia-smi lists other GPUs of the same memory after the baseline:
    the next deploy's gate says the GPUs changed and judges it against the release it
    replaces. Nothing here is judged on speed: the lab's own speed will do."""
    code, first = deploy(lab, "--limit", "ct200", *K2)
    assert code == 0, first
    inventory = str(lab.inventory)
    measured = lab.orch(
        "baseline", "qwen-dflash", "-i", inventory, "--limit", "ct200", "--json", *FAST, *K2
    )
    assert measured.code == 0, measured
    fingerprint = target(measured.json, "ct200")["baseline"]["fingerprint"]
    assert fingerprint["gpus"] == "2 x NVIDIA RTX A6000 (49140 MiB)"

    gpus = lab.lab.paths.host("pve1").container(200).gpus
    listed = json.loads(gpus.read_text())
    gpus.write_text(json.dumps([{**g, "name": "NVIDIA RTX 6000 Ada Generation"} for g in listed]))
    k3 = ["--set", "server.num_speculative_tokens=3", "--set", "gate.min_mean_acceptance_length=2"]
    code, second = deploy(lab, "--limit", "ct200", *k3)
    speed = target(second, "ct200")["gate"]["speed"]
    assert speed["reference"]["kind"] == "replaced_release", speed["reason"]
    assert speed["reason"].startswith(
        "the GPUs changed: baseline measured on 2 x NVIDIA RTX A6000 (49140 MiB), nvidia-smi "
        "now lists 2 x NVIDIA RTX 6000 Ada Generation (49140 MiB)"
    ), speed["reason"]
