"""`orch status --wait` on the lab (issue 33 item 6): it waits while a live run holds a
container's lock, says what it waits for, ends when the lock goes, and a SIGINT stops
it cleanly (exit 130, the status it last read, no traceback)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtools import LabHandle
from orchrun import ROOT

from orchestrator.container.lock import Owner

pytestmark = pytest.mark.lab

NAME = "ct200"


def hold_lock(lab: LabHandle) -> Path:
    """A lock a live run holds: this test's own process, on this machine."""
    lock = lab.deployment_dir(NAME) / "lock"
    lock.mkdir(parents=True)
    owner = Owner("run-live", "ops", socket.gethostname(), os.getpid(), time.time())
    (lock / "owner.json").write_text(owner.to_json())
    return lock


def waiting(lab: LabHandle, *args: str) -> subprocess.Popen[str]:
    argv = ["status", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, "--wait", *args]
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=lab.env,
        cwd=ROOT,
    )


def said_waiting(process: subprocess.Popen[str]) -> str:
    """The first line the wait says on stderr (it waits for a run)."""
    assert process.stderr is not None
    return process.stderr.readline()


def test_status_waits_for_a_live_runs_lock_and_a_sigint_stops_it_cleanly(
    lab: LabHandle,
) -> None:
    lock = hold_lock(lab)

    stopped = waiting(lab, "--json")
    try:
        assert said_waiting(stopped).startswith(f"waiting for {NAME}: run run-live by ops@")
        stopped.send_signal(signal.SIGINT)
        out, err = stopped.communicate(timeout=60)
    finally:
        if stopped.poll() is None:
            stopped.kill()
    assert stopped.returncode == 130, err
    document = json.loads(out)
    assert (document["result"], document["state"]) == ("interrupted", "deploying")
    assert "Traceback" not in err

    ends = waiting(lab, "--timeout", "2m")
    try:
        assert said_waiting(ends).startswith(f"waiting for {NAME}: run run-live")
        (lock / "owner.json").unlink()
        lock.rmdir()
        out, err = ends.communicate(timeout=120)
    finally:
        if ends.poll() is None:
            ends.kill()
    assert ends.returncode == 0, err
    assert "nothing deployed yet" in out


def test_status_wait_out_of_time_needs_attention(lab: LabHandle) -> None:
    hold_lock(lab)
    args = ["status", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME]
    timed_out = lab.orch(*args, "--wait", "--timeout", "3s", "--json")
    assert timed_out.code == 3, str(timed_out)
    assert (timed_out.json["result"], timed_out.json["state"]) == ("needs_attention", "deploying")
    assert "still waiting after 3 s: ct200: run run-live" in timed_out.stderr
    refused = lab.orch(*args, "--timeout", "3s")
    assert refused.code == 2 and "--timeout goes with --wait" in refused.stderr
