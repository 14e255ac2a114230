"""Every document's `result` is its exit code's word (docs/json.md), for the commands
that work on this machine, run as a user runs them: a success, a check that fails, and
bad input (the Error document) alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from orchrun import PLAIN, ROOT
from orchrun import orch as run_orch

from orchestrator.contract import run_result
from orchestrator.documents import AnyDocument

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
