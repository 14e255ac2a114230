"""Hooks around real deploys on the lab: a failing pre_deploy changes nothing on any
container; post_deploy, on_rollback and on_failure see the run as it ended and never
change its result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from labtools import FAST, LabHandle

pytestmark = pytest.mark.lab

GUESSED_IDS = "drafter.overrides.dflash_config.target_layer_ids=[1,17,33,49,63]"
REPORT = """
import json, os, sys
record = {k: v for k, v in os.environ.items() if k.startswith("ORCH_")}
record["document"] = json.loads(sys.stdin.read() or "null")
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(record) + "\\n")
sys.exit(int(sys.argv[2]))
"""


def hooks(tmp_path: Path, **exit_codes: int) -> list[str]:
    """`--set hooks.EVENT=[python, report.py, FILE, CODE]` for each event given."""
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    sets = []
    for event, code in exit_codes.items():
        argv = [sys.executable, str(script), str(tmp_path / "ran.jsonl"), str(code)]
        sets += ["--set", f"hooks.{event}={json.dumps(argv)}"]
    return sets


def ran(tmp_path: Path) -> list[dict]:
    path = tmp_path / "ran.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_failing_pre_deploy_changes_nothing(shared_lab: LabHandle, tmp_path: Path) -> None:
    """The shared lab's state check after the test holds every file, link and PID."""
    result = shared_lab.orch(
        "deploy", "qwen-dflash", "-i", str(shared_lab.inventory), "--json",
        *FAST, *hooks(tmp_path, pre_deploy=4),
    )  # fmt: skip
    assert result.code == 1, result.stderr
    # --json prints one document, errors included: the hook's refusal as an Error document.
    assert (result.json["kind"], result.json["result"]) == ("Error", "not_applied")
    assert "error: hook pre_deploy (" in result.stderr
    assert "exit 4 after" in result.stderr and "the deploy did not start" in result.stderr
    (record,) = ran(tmp_path)
    assert record["ORCH_CONTAINERS"] == "ct200,ct201" and record["document"] is None
    status = shared_lab.orch("status", "qwen-dflash", "-i", str(shared_lab.inventory), "--json")
    assert status.json["state"] == "nothing_deployed"


def test_hooks_see_the_run_as_it_ended(lab: LabHandle, tmp_path: Path) -> None:
    inventory = str(lab.inventory)
    good = lab.orch(
        "deploy", "qwen-dflash", "-i", inventory, "--limit", "ct200", "--json", *FAST,
        *hooks(tmp_path, pre_deploy=0, post_deploy=0, on_failure=0),
    )  # fmt: skip
    assert good.code == 0, str(good)
    pre, post = ran(tmp_path)
    run_id = good.json["run_id"]
    assert (pre["ORCH_HOOK"], pre["ORCH_RUN_ID"], pre["ORCH_CONTAINERS"]) == (
        "pre_deploy", run_id, "ct200"
    )  # fmt: skip
    assert (post["ORCH_HOOK"], post["ORCH_RESULT"], post["ORCH_DEPLOYED"]) == (
        "post_deploy", "ok", "ct200"
    )  # fmt: skip
    assert post["document"]["run_id"] == run_id and post["ORCH_RUN_LOG"] == good.json["log"]
    assert [h["event"] for h in good.json["hooks"]] == ["post_deploy"]

    (tmp_path / "ran.jsonl").unlink()
    bad = lab.orch(
        "deploy", "qwen-dflash", "-i", inventory, "--limit", "ct200", "--json", *FAST,
        "--force", "--set", GUESSED_IDS,
        *hooks(tmp_path, post_deploy=0, on_rollback=0, on_failure=5),
    )  # fmt: skip
    assert bad.code == 1, bad.stderr  # the failing on_failure hook changes nothing
    assert bad.json["result"] == "not_applied"
    records = {r["ORCH_HOOK"]: r for r in ran(tmp_path)}
    assert list(records) == ["on_rollback", "on_failure"]
    assert records["on_rollback"]["ORCH_ROLLED_BACK"] == "ct200"
    assert records["on_failure"]["ORCH_RESULT"] == "not_applied"
    reported = {h["event"]: h for h in bad.json["hooks"]}
    assert reported["on_failure"]["exit_code"] == 5 and reported["on_rollback"]["exit_code"] == 0
    assert "hook on_failure (" in bad.stderr and "exit 5 after" in bad.stderr
