"""A live deploy's lock on the lab, against a second run on a shorter lease, a step of
the container's clock, and `orch unlock` (issue 35 cause 1, issue 33 item 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtools import FAST, LabHandle
from orchrun import ROOT

pytestmark = pytest.mark.lab

NAME = "ct200"
SLOW_LOAD = ["--set", f"server.env.ORCH_LAB_FAULTS={json.dumps(json.dumps({'load_seconds': 8}))}"]


def deploy_args(lab: LabHandle, *args: str) -> list[str]:
    return ["deploy", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, *FAST, *args]


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def test_a_live_deploys_lock_survives_a_short_lease_a_clock_step_and_unlock(
    lab: LabHandle,
) -> None:
    lock = lab.deployment_dir(NAME) / "lock"
    first = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *deploy_args(lab, "--json", *SLOW_LOAD)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=lab.env,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        while not (lock / "owner.json").exists():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        owner = json.loads((lock / "owner.json").read_text())
        assert (owner["pid"], owner["lease"]) == (first.pid, 600)
        # Silent 13 s by the container's uptime; 2 h by its wall clock, stepped ahead since.
        (lock / "heartbeat").write_text(f"{uptime() - 13:.2f}\n")
        stepped = time.time() - 7200
        os.utime(lock / "heartbeat", (stepped, stepped))

        second = lab.orch(*deploy_args(lab, "--set", "lock_lease=5"))
        assert second.code == 3, second.stdout + second.stderr
        assert f"deploy lock held by run {owner['run_id']}" in second.stdout + second.stderr

        unlock = lab.orch("unlock", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME)
        assert unlock.code == 3
        assert f"run {owner['run_id']}" in unlock.stdout and "--force" in unlock.stdout
        assert (lock / "owner.json").exists()

        out, _ = first.communicate(timeout=300)
        assert first.returncode == 0, out
        assert json.loads(out)["targets"][0]["result"] == "deployed"
        assert not lock.exists()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)


def test_a_forced_unlock_stops_a_live_deploy_at_its_next_safe_point(lab: LabHandle) -> None:
    """Issue 33 item 2: `orch unlock` refuses the live run's lock (exit 3, naming it);
    `--force` removes it, and the run, in its switch, ends on the gated release and
    stops there (exit 3), saying why."""
    journal = lab.deployment_dir(NAME) / "journal.json"
    lock = lab.deployment_dir(NAME) / "lock"
    unlock = ["unlock", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME]
    run = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *deploy_args(lab, "--json", *SLOW_LOAD)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=lab.env,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        while not journal.exists() or json.loads(journal.read_text())["step"] != "wait ready":
            assert run.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        owner = json.loads((lock / "owner.json").read_text())

        refused = lab.orch(*unlock)
        assert refused.code == 3, refused.stdout + refused.stderr
        assert f"run {owner['run_id']}" in refused.stdout and (lock / "owner.json").exists()
        forced = lab.orch(*unlock, "--force")
        assert forced.code == 0, forced.stdout + forced.stderr

        out, _ = run.communicate(timeout=300)
        assert run.returncode == 3, out
        [target] = json.loads(out)["targets"]
        assert (target["result"], target["gate"]["verdict"]) == ("deployed", "pass")
        assert "the deploy lock was removed by orch unlock --force" in target["error"]
        status = lab.orch(
            "status", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, "--json"
        )
        [row] = status.json["targets"]
        assert (row["state"], row["release"]) == ("serving", target["release"]), row
        assert row["release_gate"]["result"] == "pass"
        assert not journal.exists() and not lock.exists()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=30)
