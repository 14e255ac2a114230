"""Logs that last, on the lab: the run's local log, each release's server log, `orch logs`."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from labdeploy import deploy
from labtools import LabHandle
from orchrun import ROOT

pytestmark = pytest.mark.lab


def lines_until(output: queue.Queue[str], wanted: str, timeout: float = 60) -> list[str]:
    """Lines read from a process until one contains `wanted`."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while not any(wanted in line for line in seen):
        seen.append(output.get(timeout=max(0.1, deadline - time.monotonic())))
    return seen


def processes_naming(text: str) -> list[int]:
    """PIDs of live processes whose command line mentions `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(entry.name))
    return found


def test_a_deploy_keeps_its_log_and_each_release_its_server_log(lab: LabHandle) -> None:
    code, run = deploy(lab)
    assert code == 0, run
    run_id = run["run_id"]

    # The run's log: every line names the run, each container's steps and commands.
    log = Path(lab.env["ORCH_STATE_DIR"]) / "runs" / f"{run_id}.log"
    assert run["log"] == str(log)
    lines = log.read_text().splitlines()
    assert all(line.split(" ")[1] == run_id for line in lines)
    for name in ("ct200", "ct201"):
        mine = [line.split(" ", 3)[3] for line in lines if line.split(" ")[2] == name]
        assert "step: gate" in mine
        assert any(entry.startswith("note: result deployed, gate pass") for entry in mine)
        assert any(entry.startswith("run: ") and "setsid" in entry for entry in mine)
        assert any(entry.startswith("exit: 0 after ") for entry in mine)
        assert any(entry.startswith("stdout: ") for entry in mine)

    shown = lab.orch("history", "--show", run_id[:-2])
    assert shown.code == 0, str(shown)
    assert shown.stdout.splitlines() == lines
    as_json = lab.orch("history", "--show", run_id[:-2], "--json").json
    assert (as_json["kind"], as_json["run_id"], as_json["lines"]) == ("RunLog", run_id, lines)
    unknown = lab.orch("history", "--show", "19990101")
    assert unknown.code == 2 and "no run log for '19990101'" in unknown.stderr

    # A run log that cannot be written is a warning, not a failed run.
    blocked = Path(lab.env["ORCH_STATE_DIR"]) / "blocked"
    blocked.mkdir()
    (blocked / "runs").write_text("a file where the runs directory goes")
    elsewhere = LabHandle(lab.lab, {**lab.env, "ORCH_STATE_DIR": str(blocked)})
    dry = elsewhere.orch("deploy", "qwen-dflash", "-i", str(lab.inventory), "--dry-run", "--json")
    assert dry.code == 0, str(dry)
    assert [w for w in dry.json["warnings"] if "could not write the run log" in w]

    # On the target: the server writes into its release, server.log points there.
    logs = {}
    for name in ("ct200", "ct201"):
        release = next(t for t in run["targets"] if t["name"] == name)["release"]
        link = lab.deployment_dir(name) / "server.log"
        assert os.readlink(link) == f"releases/{release}/server.log"
        logs[name] = lab.deployment_dir(name) / "releases" / release / "server.log"
        assert logs[name].stat().st_size > 0

    tail = lab.orch("logs", "qwen-dflash", "-i", str(lab.inventory), "-n", "5")
    assert tail.code == 0, str(tail)
    for name, path in logs.items():
        shown_lines = [
            line.removeprefix(f"{name}: ")
            for line in tail.stdout.splitlines()
            if line.startswith(f"{name}: ")
        ]
        assert len(shown_lines) == 5
        # five lines in a row of the log (which may have grown since, and repeats lines)
        written = path.read_text().splitlines()
        windows = [written[start : start + 5] for start in range(len(written) - 4)]
        assert shown_lines in windows

    # Following: what is written shows up; Ctrl-C ends it with 0 and nothing left running.
    args = ["logs", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct201", "-f", "-n", "1"]
    follow = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=lab.env,
        cwd=ROOT,
    )
    output: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(
        target=lambda: [output.put(line) for line in follow.stdout or []], daemon=True
    )
    reader.start()
    try:
        first = output.get(timeout=60)
        assert first.rstrip("\n") in logs["ct201"].read_text().splitlines()
        with logs["ct201"].open("a") as server_log:
            server_log.write("marker written while following\n")
        assert lines_until(output, "marker written while following")[-1] == (
            "marker written while following\n"
        )
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=60) == 0, follow.stderr.read() if follow.stderr else ""
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert processes_naming(str(lab.deployment_dir("ct201") / "server.log")) == []
    assert processes_naming(str(logs["ct201"])) == []
