"""kinds: the cases that run a real process (a shell, the CLI or a script); the
rest are unit tests in tests/unit/test_kinds.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = ROOT / "inventories" / "example.yaml"
EAGLE3 = "RedHatAI/Qwen3-8B-speculator.eagle3"
MTP = "Qwen/Qwen3.6-27B:mtp"


def test_profiles_json_lists_each_profile_with_its_kind() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "profiles", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (document["kind"], document["api_version"]) == ("Profiles", "orch/v1")
    by_name = {row["name"]: row for row in document["profiles"]}
    assert by_name[EAGLE3]["kind"] == "eagle3"
    assert by_name[MTP]["kind"] == "mtp"
    assert by_name[MTP]["mtp_layers"] == 1
    assert by_name["z-lab/Qwen3.6-27B-DFlash"]["num_target_layers"] == 64
    assert by_name["z-lab/Qwen3.6-27B-DFlash"]["kind"] == "dflash"
