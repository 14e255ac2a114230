"""stop, start, restart and remove on the lab: each a run under the deploy lock, recorded
in the local history and on the container's audit log, and `status` saying where the
deployment stands after each."""

from __future__ import annotations

import json

import pytest
from labtools import FAST, LabHandle

from orchestrator.lab.paths import ContainerPaths, pid_alive

pytestmark = pytest.mark.lab

NAME = "ct200"


def run(lab: LabHandle, *args: str) -> tuple[int, dict]:
    done = lab.orch(*args, "-i", str(lab.inventory), "--limit", NAME, "--json")
    assert done.stdout, done.stderr
    return done.code, done.json


def status(lab: LabHandle) -> tuple[int, dict]:
    code, doc = run(lab, "status", "qwen-dflash")
    [row] = doc["targets"]
    return code, row


def audit(lab: LabHandle) -> list[dict]:
    lines = (lab.deployment_dir(NAME) / "audit.log").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_stop_status_start_restart_remove(lab: LabHandle) -> None:
    code, deployed = run(lab, "deploy", "qwen-dflash", *FAST)
    assert code == 0, deployed
    [entry] = deployed["targets"]
    release = entry["release"]
    _, serving = status(lab)
    first_pid = serving["pid"]

    code, stopped = run(lab, "stop", "qwen-dflash")
    assert code == 0, stopped
    assert stopped["kind"] == "ServerRun" and stopped["action"] == "stop"
    [target] = stopped["targets"]
    assert (target["result"], target["current"]) == ("stopped", release)
    assert not pid_alive(first_pid)
    code, row = status(lab)
    assert code == 0, row  # stopped as asked: nobody needs to look
    assert (row["state"], row["server"], row["release"]) == ("stopped", "none", release)
    assert row["last_run"]["action"] == "stop"
    assert row["release_gate"]["result"] == "pass"  # the gate that admitted it, still
    assert not (lab.deployment_dir(NAME) / "lock").exists()
    assert not (lab.deployment_dir(NAME) / "journal.json").exists()

    code, again = run(lab, "stop", "qwen-dflash")  # nothing running: nothing to do
    assert code == 0 and again["targets"][0]["result"] == "unchanged"

    code, started = run(lab, "start", "qwen-dflash", *FAST)
    assert code == 0, started
    [target] = started["targets"]
    assert (target["result"], target["current"]) == ("started", release)
    assert target["gate"]["verdict"] == "pass"
    assert {"stop server", "start server", "wait ready", "gate"} <= set(target["steps"])
    code, row = status(lab)
    assert code == 0 and (row["state"], row["health"]) == ("serving", 200)
    assert row["release_gate"]["run_id"] == started["run_id"]
    started_pid = row["pid"]

    code, already = run(lab, "start", "qwen-dflash", *FAST)
    assert code == 0 and already["targets"][0]["result"] == "unchanged"
    assert status(lab)[1]["pid"] == started_pid

    code, restarted = run(lab, "restart", "qwen-dflash", *FAST)
    assert code == 0, restarted
    assert restarted["targets"][0]["result"] == "restarted"
    code, row = status(lab)
    assert code == 0 and row["state"] == "serving" and row["pid"] != started_pid
    assert not pid_alive(started_pid)

    refused = lab.orch("remove", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME)
    assert refused.code == 2 and "--yes" in refused.stderr
    assert status(lab)[1]["state"] == "serving"

    last_pid = status(lab)[1]["pid"]
    code, removed = run(lab, "remove", "qwen-dflash", "--yes")
    assert code == 0, removed
    assert removed["targets"][0]["result"] == "removed"
    assert not pid_alive(last_pid)
    assert sorted(p.name for p in lab.deployment_dir(NAME).iterdir()) == ["audit.log"]
    code, row = status(lab)
    assert code == 0 and row["state"] == "nothing_deployed", row

    actions = [(line["action"], line["result"]) for line in audit(lab)]
    assert actions == [
        ("deploy", "deployed"),
        ("stop", "stopped"),
        ("stop", "unchanged"),
        ("start", "started"),
        ("start", "unchanged"),
        ("restart", "restarted"),
        ("remove", "removed"),
    ]
    runs = lab.orch("history", "--json").json["runs"]
    assert [r["command"] for r in runs][:7] == [
        "remove",
        "restart",
        "start",
        "start",
        "stop",
        "stop",
        "deploy",
    ]

    code, redeployed = run(lab, "deploy", "qwen-dflash", *FAST)  # a fresh start after removal
    assert code == 0 and redeployed["targets"][0]["result"] == "deployed", redeployed


def test_start_of_a_release_whose_gate_now_fails_rolls_nothing_back(lab: LabHandle) -> None:
    code, deployed = run(lab, "deploy", "qwen-dflash", *FAST)
    assert code == 0, deployed
    release = deployed["targets"][0]["release"]
    assert run(lab, "stop", "qwen-dflash")[0] == 0
    ContainerPaths(lab.deployment_dir(NAME).parents[4]).faults.write_text(
        json.dumps({"drop_spec_decode": True})
    )

    code, started = run(lab, "start", "qwen-dflash", *FAST)

    assert code == 1, started
    [target] = started["targets"]
    assert target["result"] == "failed" and target["gate"]["verdict"] != "pass"
    assert "nothing to roll back" in target["error"]
    assert (target["current"], target["rollback_gate"]) == (release, None)
    code, row = status(lab)
    assert row["release"] == release and row["server"] == "running"
    assert row["release_gate"]["run_id"] == started["run_id"]
    assert row["release_gate"]["result"] == target["gate"]["verdict"]
