"""End to end on labs whose vLLM stand-ins claim a given version: what preflight reads and
judges before any restart, and what the server does when forced anyway."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from labtools import LabHandle
from test_deploy_lab import FAST, deploy, serving_pid, target

pytestmark = pytest.mark.lab

V2_ERROR = (
    "NotImplementedError: DFlash drafters with mixed sliding/full attention require the V2 "
    "model runner; relaunch with VLLM_USE_V2_MODEL_RUNNER=1."
)
RUNNER_OFF = 'server.env={VLLM_USE_V2_MODEL_RUNNER: "0"}'
"""V1 forced: 0.26 - 0.28 refuse a mixed drafter there (unset, they pick V2 themselves)."""


def releases(lab: LabHandle, name: str) -> set[str]:
    return {p.name for p in (lab.deployment_dir(name) / "releases").iterdir()}


@pytest.mark.parametrize("lab", [{"vllm_version": "0.27.1"}], indirect=True)
def test_on_vllm_0_27_the_v2_runner_is_checked_before_the_restart(lab: LabHandle) -> None:
    code, first = deploy(lab)
    assert code == 0, first
    for name in ("ct200", "ct201"):
        entry = target(first, name)
        assert entry["result"] == "deployed", entry
        assert entry["server_version"] == "0.27.1"
        assert not [f for f in entry["findings"] if f["field"].startswith("server.")]
    good = target(first, "ct200")["release"]
    pid = serving_pid(lab, "ct200")

    # With the V1 runner forced preflight stops it: nothing written, nothing restarted.
    code, refused = deploy(lab, "--limit", "ct200", "--set", RUNNER_OFF)
    assert code == 1
    entry = target(refused, "ct200")
    assert entry["result"] == "failed" and "preflight" in entry["error"]
    [finding] = [f for f in entry["findings"] if f["severity"] == "error"]
    assert finding["field"] == "server.env.VLLM_USE_V2_MODEL_RUNNER"
    assert 'set server.env VLLM_USE_V2_MODEL_RUNNER: "1"' in finding["message"]
    assert "vLLM 0.27.1" in finding["message"]
    assert releases(lab, "ct200") == {good}
    assert serving_pid(lab, "ct200") == pid

    # Forced, the server dies at start with vLLM's own error, the output shows it, and the
    # previous release comes back.
    forced = lab.orch(
        "deploy",
        "qwen-dflash",
        "-i",
        str(lab.inventory),
        "--limit",
        "ct200",
        "--force",
        "--set",
        RUNNER_OFF,
        *FAST,
    )
    assert forced.code == 1, forced.stdout + forced.stderr
    assert "did not become ready" in forced.stdout
    assert V2_ERROR in " ".join(forced.stdout.split())
    assert "Preflight had found: server.env.VLLM_USE_V2_MODEL_RUNNER" in forced.stdout
    audit = json.loads((lab.deployment_dir("ct200") / "audit.log").read_text().splitlines()[-1])
    assert audit["result"] == "rolled_back"
    assert (lab.deployment_dir("ct200") / "current").readlink() == Path("releases") / good
    assert serving_pid(lab, "ct200") != pid


@pytest.mark.parametrize("lab", [{"vllm_version": "0.19.1"}], indirect=True)
def test_on_vllm_0_19_preflight_names_the_version_and_the_upgrade(lab: LabHandle) -> None:
    code, refused = deploy(lab, "--limit", "ct201")
    assert code == 1, refused
    entry = target(refused, "ct201")
    assert entry["result"] == "failed" and "preflight" in entry["error"]
    [finding] = [f for f in entry["findings"] if f["severity"] == "error"]
    assert finding["field"] == "server.version"
    assert finding["message"].startswith("vLLM 0.19.1 has no speculative method 'dflash'")
    assert finding["message"].endswith(
        'upgrade to >= 0.26.0 with server.env VLLM_USE_V2_MODEL_RUNNER: "1"'
    )
    assert not (lab.deployment_dir("ct201") / "releases").exists()
    assert not (lab.deployment_dir("ct201") / "server.pid").exists()
