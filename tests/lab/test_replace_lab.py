"""Switching a container from one playbook to another: preflight names the other
playbook's server holding the port and GPUs, `deploy --replace` stops it in the
transaction, and a new release that fails its gate brings it back, gated."""

from __future__ import annotations

import json

import pytest
from labtools import FAST, LabHandle

pytestmark = pytest.mark.lab

NAME = "ct200"
NO_MTP_HEADS = [
    "--set",
    "target.path='{{ vars.models_dir }}/Qwen3-8B'",
    "--set",
    "server.tensor_parallel_size=1",
]


def run(lab: LabHandle, *args: str) -> tuple[int, dict]:
    done = lab.orch(*args, "-i", str(lab.inventory), "--limit", NAME, "--json")
    assert done.stdout, done.stderr
    return done.code, done.json


def row(lab: LabHandle, playbook: str) -> tuple[int, dict]:
    code, doc = run(lab, "status", playbook)
    [target] = doc["targets"]
    return code, target


def test_switch_dflash_to_mtp_and_back_on_a_failed_gate(lab: LabHandle) -> None:
    code, doc = run(lab, "deploy", "qwen-dflash", *FAST)
    assert code == 0, doc
    dflash = doc["targets"][0]["release"]
    dflash_pid = row(lab, "qwen-dflash")[1]["pid"]

    code, refused = run(lab, "deploy", "qwen-mtp", *FAST)
    assert code == 1, refused
    errors = [f for f in refused["targets"][0]["findings"] if f["severity"] == "error"]
    port = next(f for f in errors if f["field"] == "server.port")
    assert f"qwen-dflash's server (pid {dflash_pid})" in port["message"]
    assert f"orch stop qwen-dflash -i {lab.inventory} --limit {NAME}" in port["message"]
    assert "--replace qwen-dflash" in port["message"]
    assert any(f["field"].startswith("gpu[") and "qwen-dflash" in f["message"] for f in errors)
    assert row(lab, "qwen-dflash")[1]["pid"] == dflash_pid  # nothing touched

    code, dry = run(lab, "deploy", "qwen-mtp", "--replace", "qwen-dflash", "--dry-run", *FAST)
    assert code == 0, dry

    code, switched = run(lab, "deploy", "qwen-mtp", "--replace", "qwen-dflash", *FAST)
    assert code == 0, switched
    [target] = switched["targets"]
    assert target["result"] == "deployed" and target["gate"]["verdict"] == "pass"
    assert target["replaced"] == {"playbook": "qwen-dflash", "release": dflash, "result": "stopped"}
    mtp = target["release"]
    code, stopped = row(lab, "qwen-dflash")
    assert code == 0 and stopped["state"] == "stopped", stopped
    assert stopped["last_run"]["run_id"] == switched["run_id"]
    code, serving = row(lab, "qwen-mtp")
    assert code == 0 and (serving["state"], serving["release"]) == ("serving", mtp)
    for playbook in ("qwen-dflash", "qwen-mtp"):
        directory = lab.deployment_dir(NAME, playbook)
        assert not (directory / "lock").exists() and not (directory / "journal.json").exists()

    code, back = run(lab, "deploy", "qwen-dflash", "--replace", "qwen-mtp", *FAST)
    assert code == 0 and back["targets"][0]["replaced"]["result"] == "stopped", back

    code, failed = run(
        lab, "deploy", "qwen-mtp", "--replace", "qwen-dflash", "--force", *NO_MTP_HEADS, *FAST
    )

    assert code == 1, failed
    [target] = failed["targets"]
    assert target["gate"]["verdict"] == "fail"
    assert target["result"] == "rolled_back"
    restored = target["replaced"]
    assert (restored["playbook"], restored["release"], restored["result"]) == (
        "qwen-dflash",
        dflash,
        "restored",
    )
    assert restored["gate"]["verdict"] == "pass"
    code, dflash_row = row(lab, "qwen-dflash")
    assert code == 0 and (dflash_row["state"], dflash_row["release"]) == ("serving", dflash)
    assert dflash_row["release_gate"]["run_id"] == failed["run_id"]
    assert dflash_row["release_gate"]["result"] == "pass"
    code, mtp_row = row(lab, "qwen-mtp")
    assert mtp_row["server"] != "running", mtp_row
    audit = [json.loads(line) for line in (lab.deployment_dir(NAME) / "audit.log").open()]
    assert [(line["action"], line["run_id"]) for line in audit][-2:] == [
        ("deploy", back["run_id"]),  # qwen-dflash's own deploy replacing qwen-mtp
        ("start", failed["run_id"]),  # stopped and started again by the failed replace
    ]


GUESSED_IDS = "drafter.overrides.dflash_config.target_layer_ids=[1,17,33,49,63]"


def test_a_failed_replace_keeps_the_new_playbook_on_its_previous_release(lab: LabHandle) -> None:
    """Issue 33: qwen-dflash, stopped by qwen-mtp's --replace, is deployed back with the
    guessed layer ids and fails its gate: qwen-mtp is restored and serving, and
    qwen-dflash stays on the release it was on (stopped), which `orch start` starts."""
    code, doc = run(lab, "deploy", "qwen-dflash", *FAST)
    assert code == 0, doc
    dflash = doc["targets"][0]["release"]
    code, switched = run(lab, "deploy", "qwen-mtp", "--replace", "qwen-dflash", *FAST)
    assert code == 0, switched
    mtp = switched["targets"][0]["release"]

    code, failed = run(
        lab,
        "deploy",
        "qwen-dflash",
        "--replace",
        "qwen-mtp",
        "--force",
        "--set",
        GUESSED_IDS,
        *FAST,
    )

    assert code == 1, failed
    [target] = failed["targets"]
    assert (target["gate"]["verdict"], target["result"]) == ("fail", "rolled_back")
    assert (target["previous_release"], target["current"]) == (dflash, dflash)
    assert f"back on {dflash} (stopped, as before this run)" in target["error"]
    assert "qwen-mtp restored" in target["error"]
    assert "no previous release" not in lab.orch("history", "--show", failed["run_id"]).stdout
    assert (target["replaced"]["release"], target["replaced"]["result"]) == (mtp, "restored")
    code, mtp_row = row(lab, "qwen-mtp")
    assert code == 0 and (mtp_row["state"], mtp_row["release"]) == ("serving", mtp), mtp_row
    code, dflash_row = row(lab, "qwen-dflash")
    assert (dflash_row["state"], dflash_row["release"]) == ("stopped", dflash), dflash_row
    assert (lab.deployment_dir(NAME) / "releases" / dflash).is_dir()

    assert run(lab, "stop", "qwen-mtp")[0] == 0
    code, started = run(lab, "start", "qwen-dflash", *FAST)

    assert code == 0, started
    assert (started["targets"][0]["result"], started["targets"][0]["current"]) == (
        "started",
        dflash,
    )
    code, dflash_row = row(lab, "qwen-dflash")
    assert code == 0 and (dflash_row["state"], dflash_row["release"]) == ("serving", dflash)
