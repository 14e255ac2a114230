"""serving: the cases that run a real process (a shell, the CLI or a script); the
rest are unit tests in tests/unit/test_serving.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.drafters.profiles import get_profile, target_files
from orchestrator.serving.judge import Launch

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = Path(__file__).parent.parent / "fixtures" / "drafters"
DRAFTER = get_profile("z-lab/Qwen3.6-27B-DFlash").config
TARGET = json.loads(target_files("z-lab/Qwen3.6-27B-DFlash")["config.json"])
PLAYBOOK_LAUNCH = Launch({"VLLM_USE_V2_MODEL_RUNNER": "1"}, "flash_attn", "dflash")
BARE_LAUNCH = Launch({}, "flash_attn", "dflash")


# --- the table -------------------------------------------------------------------------------


def verify(drafter: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "verify-config",
            "--drafter",
            str(drafter),
            "--target",
            str(FIXTURES / "Qwen3.6-27B.config.json"),
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_verify_config_judges_the_pair_against_a_server_version(rendered: Path) -> None:
    done = verify(rendered, "--server-version", "0.27.1")
    assert done.returncode == 1, done.stderr
    fields = {f["field"] for f in json.loads(done.stdout)["findings"]}
    assert "server.env.VLLM_USE_V2_MODEL_RUNNER" in fields

    done = verify(
        rendered,
        "--server-version",
        "0.27.1",
        "--server-env",
        "VLLM_USE_V2_MODEL_RUNNER=1",
        "--attention-backend",
        "flash_attn",
    )
    assert done.returncode == 0, done.stdout + done.stderr

    done = verify(
        rendered, "--server-version", "0.24.0", "--server-env", "VLLM_USE_V2_MODEL_RUNNER=1"
    )
    assert done.returncode == 1
    messages = [f["message"] for f in json.loads(done.stdout)["findings"]]
    assert any(m.startswith("vLLM 0.24.0 runs this drafter's sliding layers") for m in messages)

    done = verify(rendered, "--server-version", "not-a-version")
    assert done.returncode == 0
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--server-env", "A=1"], "need --server-version"),
        (["--server-version", "0.27.1", "--server-env", "no-equals"], "expected NAME=VALUE"),
    ],
)
def test_verify_config_refuses_bad_server_options(args: list[str], problem: str) -> None:
    done = verify(FIXTURES / "z-lab_Qwen3.6-27B-DFlash.config.json", *args)
    assert done.returncode == 2
    assert problem in done.stderr and "Traceback" not in done.stderr


def test_lab_up_refuses_a_version_that_is_not_one(tmp_path: Path) -> None:
    lab = ["lab", "up", "--dir", str(tmp_path / "lab"), "--vllm-version", "latest"]
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", *lab],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--vllm-version 'latest': the lab's vLLM knows releases 0.19.1," in done.stderr
    assert "0.34.0; not 'latest'" in done.stderr
    assert not (tmp_path / "lab").exists()
