"""A gate paused for a decision on the lab (`gate.on_inconclusive: pause`): the gate made
inconclusive by asking for more drafts than its time budget can measure, the run then
decided by `orch promote` / `orch abort` from another process, ended by its pause
timeout, or killed while paused and recovered by the next plain deploy. Every ending is
a gated release serving."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtools import FAST, LabHandle
from orchrun import ROOT

pytestmark = pytest.mark.lab

NAME = "ct200"
INCONCLUSIVE = [
    "--set",
    "gate.min_drafts=1000000",
    "--set",
    "gate.time_budget=3",
    "--set",
    "gate.on_inconclusive=pause",
    "--set",
    "server.env.X=paused",  # another release than the first deploy's
]
"""A gate that cannot measure enough drafts in its time budget: inconclusive, of a server
that answered and drafted, which pauses."""


def deploy_args(lab: LabHandle, *args: str) -> list[str]:
    return ["deploy", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, *FAST, *args]


def decide(lab: LabHandle, choice: str) -> list[str]:
    return [choice, "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, "--json"]


def current(lab: LabHandle) -> str:
    return (lab.deployment_dir(NAME) / "current").readlink().name


def serving(lab: LabHandle) -> dict:
    status = lab.orch("status", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, "--json")
    [row] = status.json["targets"]
    assert (status.code, row["state"]) == (0, "serving"), row
    return row


def first_release(lab: LabHandle) -> str:
    first = lab.orch(*deploy_args(lab, "--json"))
    assert first.code == 0, first.stdout + first.stderr
    return first.json["targets"][0]["release"]


def paused_run(lab: LabHandle, *args: str) -> subprocess.Popen[str]:
    """A deploy whose gate pauses, once it is paused (its journal at `paused`)."""
    journal = lab.deployment_dir(NAME) / "journal.json"
    run = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *deploy_args(lab, "--json", *INCONCLUSIVE, *args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=lab.env,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 180
    while not journal.exists() or json.loads(journal.read_text())["step"] != "paused":
        if run.poll() is not None or time.monotonic() > deadline:
            run.kill()
            raise AssertionError(f"never paused: {run.communicate()[0]}")
        time.sleep(0.1)
    return run


def ended(run: subprocess.Popen[str]) -> tuple[int, dict]:
    out, _ = run.communicate(timeout=120)
    return run.returncode, json.loads(out)["targets"][0]


def test_a_paused_gate_promoted_keeps_the_new_release_gated_by_the_decision(
    lab: LabHandle,
) -> None:
    old = first_release(lab)
    run = paused_run(lab)
    try:
        status = lab.orch(
            "status", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, "--json"
        )
        [row] = status.json["targets"]
        assert (status.code, row["state"]) == (3, "paused"), row
        assert row["deploying"]["decide"]["promote"].startswith("orch promote qwen-dflash -i ")
        assert current(lab) != old  # the new release serves while paused

        promoted = lab.orch(*decide(lab, "promote"))
        assert promoted.code == 0, promoted.stdout + promoted.stderr

        code, target = ended(run)
        assert (code, target["result"]) == (0, "deployed"), target["error"]
        assert target["gate"]["verdict"] == "inconclusive"
        assert target["decisions"][-1]["choice"] == "promote"
        assert current(lab) == target["release"] != old
        row = serving(lab)
        assert row["release_gate"]["result"] == "inconclusive"
        assert row["release_gate"]["promoted"]["choice"] == "promote"
        manifest = lab.deployment_dir(NAME) / "releases" / target["release"] / "manifest.json"
        assert (
            json.loads(manifest.read_text())["promoted"]["run_id"] == row["release_gate"]["run_id"]
        )
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=30)
    refused = lab.orch(*decide(lab, "abort"))
    assert refused.code == 2 and "nothing is paused" in refused.stdout, refused.stdout


def test_a_paused_gate_aborted_or_timed_out_rolls_back(lab: LabHandle) -> None:
    old = first_release(lab)
    timed_out = lab.orch(
        *deploy_args(lab, "--json", *INCONCLUSIVE, "--set", "gate.pause_timeout=2")
    )
    [target] = timed_out.json["targets"]
    assert (timed_out.code, target["result"]) == (1, "rolled_back"), target["error"]
    assert "no decision within the pause timeout of 2 s" in target["error"]
    assert current(lab) == old and serving(lab)["release"] == old

    run = paused_run(lab)
    try:
        aborted = lab.orch(*decide(lab, "abort"))
        assert aborted.code == 0, aborted.stdout + aborted.stderr
        code, target = ended(run)
        assert (code, target["result"]) == (1, "rolled_back"), target["error"]
        assert target["rollback_gate"]["verdict"] == "pass"
        assert "paused, then aborted by" in target["error"]
        assert current(lab) == old and serving(lab)["release"] == old
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=30)


def test_a_run_killed_while_paused_is_rolled_back_by_the_next_plain_deploy(
    lab: LabHandle,
) -> None:
    old = first_release(lab)
    run = paused_run(lab)
    run.kill()
    run.wait(timeout=30)
    paused = current(lab)
    assert paused != old

    again = lab.orch(*deploy_args(lab, "--json"))
    [target] = again.json["targets"]
    assert again.code == 0, target["error"]
    recovered = target["recovered"]
    assert (recovered["step"], recovered["to_release"], recovered["back_on"]) == (
        "paused",
        paused,
        old,
    )
    assert recovered["gate"]["verdict"] == "pass"
    assert current(lab) == old and serving(lab)["release_gate"]["result"] == "pass"
    assert not Path(lab.deployment_dir(NAME) / "lock").exists()
