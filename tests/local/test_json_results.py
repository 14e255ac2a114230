"""Every document's `result` is its exit code's word (docs/json.md), for the commands
that work on this machine, run as a user runs them: a success, a check that fails, and
bad input (the Error document) alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from orchrun import PLAIN, ROOT
from orchrun import orch as run_orch
from recorded import record_json
from rundocs import deploy_run

from orchestrator.contract import jsonable, run_result
from orchestrator.documents import AnyDocument
from orchestrator.history import History

DRAFTERS = Path(__file__).parent.parent / "fixtures" / "drafters"
EXAMPLE = str(ROOT / "inventories" / "example.yaml")
GUESS = ["--set", "drafter.overrides.dflash_config.mask_token_id=248064"]
OFFLINE = ["verify-config", "--target", str(DRAFTERS / "Qwen3.6-27B.config.json")]

COMMANDS: dict[str, tuple[list[str], str, int]] = {
    "profiles": (["profiles"], "Profiles", 0),
    "explain": (["explain", "gate.min_drafts"], "Explain", 0),
    "explain root": (["explain"], "Explain", 0),
    "explain unknown": (["explain", "gate.nosuch"], "Error", 2),
    "alerts": (["alerts", "qwen-dflash"], "Alerts", 0),
    "completion": (["completion", "bash"], "Completion", 0),
    "history": (["history"], "History", 0),
    "history show unknown": (["history", "--show", "2026"], "Error", 2),
    "render": (["render", "qwen-dflash", "-i", EXAMPLE], "Render", 0),
    "render guessed": (["render", "qwen-dflash", "-i", EXAMPLE, *GUESS], "Render", 1),
    "render unknown field": (
        ["render", "qwen-dflash", "-i", EXAMPLE, "--set", "server.prot=1"],
        "Error",
        2,
    ),
    "verify-config files": (
        [*OFFLINE, "--drafter", str(DRAFTERS / "z-lab_Qwen3.6-27B-DFlash.config.json")],
        "Findings",
        1,  # the published file lacks use_sliding_window
    ),
    "inventory import": (
        ["inventory", "import", "ansible", str(DRAFTERS.parent / "ansible" / "proxmox.yaml")],
        "InventoryImport",
        0,
    ),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_result_is_the_exit_codes_word(command: str, tmp_path: Path) -> None:
    args, kind, code = COMMANDS[command]
    done = run_orch(*args, "--json", env={**PLAIN, "ORCH_STATE_DIR": str(tmp_path)})
    assert done.code == code, str(done)
    document = done.json
    AnyDocument.model_validate(document)
    assert document["kind"] == kind
    assert document["result"] == run_result(code)


@pytest.fixture
def recorded_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A state dir whose history holds one deploy run: the environment to run orch in."""
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path))
    record_json(History(), jsonable(deploy_run([], run_id=RUN_ID)), "deploy", "ops")
    return {**PLAIN, "ORCH_STATE_DIR": str(tmp_path)}


RUN_ID = "20261204T100000Z-abcdef"


def test_report_json_is_the_runs_document_and_o_json_says_the_same(
    recorded_run: dict[str, str], tmp_path: Path
) -> None:
    printed = run_orch("report", RUN_ID[:12], "--json", env=recorded_run)
    assert printed.code == 0, str(printed)
    document = printed.json
    AnyDocument.model_validate(document)
    assert (document["kind"], document["result"]) == ("Report", run_result(0))
    assert document["run"]["run_id"] == RUN_ID and document["run"]["user"] == "ops"
    assert run_orch("report", RUN_ID, "-o", "json", env=recorded_run).json == document
    assert not (ROOT / "json").exists()
    written = tmp_path / "report.json"
    to_file = run_orch("report", RUN_ID, "--json", "-o", str(written), env=recorded_run)
    assert to_file.code == 0 and to_file.stdout == ""
    assert json.loads(written.read_text()) == document


def test_report_json_takes_no_format(recorded_run: dict[str, str]) -> None:
    refused = run_orch("report", RUN_ID, "--json", "--format", "html", env=recorded_run)
    assert refused.code == 2 and "--format" in refused.stderr
    assert (refused.json["kind"], refused.json["result"]) == ("Error", "bad_input")
