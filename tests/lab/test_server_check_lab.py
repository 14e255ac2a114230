"""The server's own dry run end to end on the lab: over SSH and `pct exec`, a container's
`vllm` whose interpreter is the real vLLM (the lab's venv, scripts/setup-vllm.sh) judges
`deploy --dry-run`, which exits 1 with vLLM's own words and changes nothing.

Until the lab serves the real vLLM itself, the test puts a `python` beside the stand-in's
`vllm` launcher (where the check looks when `vllm` is no console script) that runs the
real venv's Python."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from labtools import LabHandle
from realvllm import VENV, needs_032

pytestmark = [pytest.mark.lab, needs_032]
PLAYBOOK = "qwen3-8b-dflash"
CONTAINER = "ct200"  # reached by pct exec through its host's sshd


def real_python_beside_vllm(lab: LabHandle) -> None:
    vllm = Path(lab.container_vars(CONTAINER)["vllm"])
    python = vllm.parent / "python"
    python.write_text(
        "#!/bin/sh\n"
        "# The real vLLM's interpreter (the lab's venv names its dist without +cpu).\n"
        "export VLLM_TARGET_DEVICE=cpu\n"
        f'exec {shlex.quote(str(VENV / "bin" / "python"))} "$@"\n'
    )
    python.chmod(0o755)


def dry_run(lab: LabHandle, assignment: str) -> tuple[int, dict]:
    done = lab.orch(
        "deploy",
        PLAYBOOK,
        "-i",
        str(lab.inventory),
        "--limit",
        CONTAINER,
        "--dry-run",
        "--json",
        "--set",
        assignment,
        timeout=900,
    )
    assert done.stdout, done.stderr
    return done.code, done.json


@pytest.mark.parametrize("lab", [{"vllm_version": "0.32.0"}], indirect=True)
def test_the_targets_vllm_refuses_a_bad_launch_in_a_dry_run(lab: LabHandle) -> None:
    real_python_beside_vllm(lab)
    deployment = lab.deployment_dir(CONTAINER, PLAYBOOK)

    code, document = dry_run(lab, 'server.env.VLLM_USE_V2_MODEL_RUNNER="true"')
    assert code == 1, document
    [entry] = document["targets"]
    errors = [f for f in entry["findings"] if f["severity"] == "error"]
    words = "invalid literal for int() with base 10: 'true'"
    server = [f for f in errors if "refuses this launch at start" in f["message"]]
    assert [f["field"] for f in server] == ["server.env.VLLM_USE_V2_MODEL_RUNNER"]
    assert words in server[0]["message"] and "vLLM 0.32.0" in server[0]["message"]
    assert not deployment.exists()

    code, document = dry_run(lab, "server.speculative_config.bogus_key=1")
    assert code == 1, document
    [entry] = document["targets"]
    [error] = [f for f in entry["findings"] if f["severity"] == "error"]
    assert error["field"] == "server.speculative_config.bogus_key"
    assert "Unexpected keyword argument" in error["message"]
    assert "SpeculativeConfig" in error["message"]
    assert not deployment.exists()
