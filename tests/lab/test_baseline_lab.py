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

    k2 = ["--set", "server.num_speculative_tokens=2", "--set", "gate.min_mean_acceptance_length=2"]
    code, second = deploy(lab, "--limit", "ct200", *k2)
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
