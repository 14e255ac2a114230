"""serving: the cases that run a real process (a shell, the CLI or a script); the
rest are unit tests in tests/unit/test_serving.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.drafters.profiles import get_profile, target_files

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = Path(__file__).parent.parent / "fixtures" / "drafters"
DRAFTER = get_profile("z-lab/Qwen3.6-27B-DFlash").config
TARGET = json.loads(target_files("z-lab/Qwen3.6-27B-DFlash")["config.json"])
RUNNER = "VLLM_USE_V2_MODEL_RUNNER"


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


@pytest.fixture
def rendered(tmp_path: Path) -> Path:
    """The drafter config as orch renders it (the profile's)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DRAFTER))
    return path


def test_verify_config_judges_the_pair_against_a_server_version(rendered: Path) -> None:
    done = verify(rendered, "--server-version", "0.34.0")
    assert done.returncode == 0, done.stdout + done.stderr
    for value in ("0", "true"):
        done = verify(rendered, "--server-version", "0.34.0", "--server-env", f"{RUNNER}={value}")
        assert done.returncode == 1, done.stdout
        fields = {f["field"] for f in json.loads(done.stdout)["findings"]}
        assert f"server.env.{RUNNER}" in fields

    done = verify(rendered, "--server-version", "0.24.0")
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
