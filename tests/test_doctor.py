"""`orch doctor` on the lab, as a user runs it: read-only checks, one line each."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from labtools import LabHandle

from orchestrator.serving.capabilities import newest_version

pytestmark = pytest.mark.lab


def doctor(lab: LabHandle, *args: str) -> tuple[int, list[dict]]:
    result = lab.orch("doctor", *args, "-i", str(lab.inventory), "--json")
    assert "Traceback" not in result.stderr
    return result.code, json.loads(result.stdout)


def failures(rows: list[dict]) -> list[tuple[str, str]]:
    return [(row["subject"], row["check"]) for row in rows if not row["ok"]]


def test_a_ready_lab_passes_every_check(lab: LabHandle) -> None:
    code, rows = doctor(lab)
    assert (code, failures(rows)) == (0, [])
    checks = {(row["subject"], row["check"]) for row in rows}
    assert {("pve1", "login"), ("pve1", "pct"), ("ct200", "container")} <= checks
    assert {("ct201", "login"), ("ct200", "gpus"), ("ct201", "server command")} <= checks
    sessions = next(r for r in rows if r["check"] == "sshd sessions")
    assert sessions["detail"].startswith("MaxSessions 10;")  # OpenSSH's default, read by sshd -T
    server = next(r for r in rows if (r["subject"], r["check"]) == ("ct200", "server command"))
    assert f"vLLM {newest_version()}" in server["detail"]  # what the lab's stand-in claims


def test_a_stopped_container_fails_naming_it_with_the_fix(lab: LabHandle) -> None:
    pct = yaml.safe_load(lab.inventory.read_text())["hosts"]["pve1"]["pct_path"]
    subprocess.run([pct, "stop", "200"], check=True, timeout=30)
    code, rows = doctor(lab)
    assert code == 3
    assert failures(rows) == [("ct200", "container")]
    (row,) = [r for r in rows if not r["ok"]]
    assert "stopped" in row["detail"] and row["fix"].endswith(f"{pct} start 200")
    text = lab.orch("doctor", "-i", str(lab.inventory))
    assert text.code == 3 and "FAIL ct200" in text.stdout and "1 failed" in text.stdout


def test_with_a_playbook_missing_weights_are_a_failure(lab: LabHandle) -> None:
    code, rows = doctor(lab, "qwen-dflash")
    assert (code, failures(rows)) == (0, [])
    assert ("ct201", "preflight") in {(row["subject"], row["check"]) for row in rows}
    models = Path(lab.container_vars("ct201")["models_dir"])
    shutil.rmtree(models / "Qwen3.6-27B-DFlash")
    code, rows = doctor(lab, "qwen-dflash")
    assert code == 3
    assert {subject for subject, _ in failures(rows)} == {"ct201"}


@pytest.mark.parametrize("lab", [{"max_sessions": 4}], indirect=True)
def test_a_host_allowing_fewer_sessions_than_orch_opens_fails_until_the_inventory_says_so(
    lab: LabHandle,
) -> None:
    code, rows = doctor(lab)
    assert (code, failures(rows)) == (3, [("pve1", "sshd sessions")])
    (row,) = [r for r in rows if not r["ok"]]
    assert row["detail"].startswith("MaxSessions 4;")
    assert row["fix"] == "set max_sessions: 4 for pve1 in the inventory"
    inventory = yaml.safe_load(lab.inventory.read_text())
    inventory["hosts"]["pve1"]["max_sessions"] = 4
    lab.inventory.write_text(yaml.safe_dump(inventory, sort_keys=False))
    code, rows = doctor(lab)
    assert (code, failures(rows)) == (0, [])
