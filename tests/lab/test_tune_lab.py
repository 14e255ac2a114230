"""`orch tune` end to end on the stand-in lab: real sshd, real pct, the streaming vLLM
stand-in, the real CLI. Each depth is a deploy transaction; the container always ends
on a gated release."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from labdeploy import deploy
from labtools import FAST, LabHandle
from orchrun import ROOT

pytestmark = pytest.mark.lab


def tune_args(lab: LabHandle, values: str) -> list[str]:
    inventory = str(lab.inventory)
    return [
        "tune",
        "qwen-dflash",
        "-i",
        inventory,
        "--limit",
        "ct200",
        *FAST,
        "--num-speculative-tokens",
        values,
    ]


def serving_gated(lab: LabHandle) -> dict:
    """ct200's status entry, asserting it serves a release a passing gate admitted."""
    status = lab.orch("status", "qwen-dflash", "-i", str(lab.inventory), "-l", "ct200", "--json")
    entry = status.json["targets"][0]
    assert (entry["state"], entry["server"]) == ("serving", "running"), entry
    assert entry["release_gate"]["result"] == "pass", entry
    return entry


SHALLOW = ["--set", "gate.min_mean_acceptance_length=2"]
"""Depth 2 accepts at most 3 tokens a step (about 2.4 on the stand-in): under the
playbook's 2.5 it would fail its gate and roll back."""


def test_tune_prints_its_table_and_ends_on_the_best_gated_release(lab: LabHandle) -> None:
    result = lab.orch(*tune_args(lab, "2,4"), *SHALLOW, timeout=600)

    assert result.code == 0, result
    out = result.stdout
    assert "orch tune qwen-dflash on ct200: server.num_speculative_tokens" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["2"], ["4"])]
    assert {(row[0], row[1]) for row in rows} == {("2", "1"), ("2", "8"), ("4", "1"), ("4", "8")}
    assert all(row[2:4] == ["deployed", "pass"] for row in rows), out
    assert "1 streams, total tok/s:" in out and "k=2" in out and "k=4" in out  # the chart
    assert "best at 1 streams: " in out and "best at 8 streams: " in out
    assert "apply it: --set server.num_speculative_tokens=" in out
    chosen = out.split("apply it: --set server.num_speculative_tokens=")[1].split()[0]
    assert chosen in ("2", "4")
    entry = serving_gated(lab)
    assert f"ct200 ended on the best passing depth: {entry['release']}" in out
    recorded = {run["run_id"]: run["command"] for run in lab.orch("history", "--json").json["runs"]}
    assert {recorded[row[-1]] for row in rows} == {"deploy"}  # each depth a deploy in history


def test_sigint_during_tune_stops_it_on_a_gated_release(lab: LabHandle) -> None:
    """SIGINT while the second depth is gated: exit 130, the loop stops at once, the
    document says where the container ended, and it serves a gated release."""
    code, first = deploy(lab, "--limit", "ct200")
    assert code == 0, first
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *tune_args(lab, "2,4,6"), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=lab.env,
        cwd=ROOT,
    )
    assert process.stderr
    gates = 0
    for line in process.stderr:  # progress: one line per step off a terminal
        if line.rstrip().endswith("ct200: gate"):
            gates += 1
            if gates == 2:
                process.send_signal(signal.SIGINT)
                break
    out, _ = process.communicate(timeout=300)

    assert process.returncode == 130, out
    document = json.loads(out)
    assert (document["kind"], document["result"], document["ended"]) == (
        "Tune",
        "interrupted",
        "interrupted",
    )
    assert [step["value"] for step in document["steps"]] == [2, 4]  # 6 never started
    entry = serving_gated(lab)
    assert document["current"] == entry["release"]
