"""orch's server check run for real by a `vllm` on this machine (the real one of
tests/realvllm.py, or the lab's stand-in): a playbook rendered for one container whose
`vllm` and model dirs are local paths, the check's program run as a real process."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from orchestrator.container import validator
from orchestrator.drafters.findings import Finding
from orchestrator.inventory import load_inventory
from orchestrator.plan import LAUNCH_SCRIPT, TargetPlan, plan_deploy
from orchestrator.playbook import Playbook
from orchestrator.preflight import ask_server
from orchestrator.serving import server_check
from orchestrator.serving.judge import Launch, read_launch
from orchestrator.transport.base import Result
from orchestrator.transport.memory import MemoryTransport

CPU = "server.env.VLLM_TARGET_DEVICE=cpu"
"""A venv whose `vllm` dist is not named `+cpu` finds vLLM's CPU platform only from this
variable (vllm/platforms/__init__.py cpu_platform_plugin); the stand-in reads it as any
other export."""


def one_container(tmp_path: Path, models_dir: Path, vllm: str) -> Path:
    """An inventory of one pct container whose models, `vllm` and state are local paths
    (the state under `tmp_path/state`, which the check must leave empty)."""
    inventory = tmp_path / "inventory.yaml"
    container = {"models_dir": str(models_dir), "vllm": vllm}
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
                        "vars": {**container, "state_dir": str(tmp_path / "state")},
                    }
                },
                "groups": {"gpu": ["ct1"]},
            }
        )
    )
    return inventory


def check_launch(
    playbook: Playbook, inventory: Path, env: Mapping[str, str] | None = None
) -> tuple[validator.ServerCheck, list[Finding], Launch, TargetPlan]:
    """The playbook's launch for the inventory's one container, checked by its `vllm` run
    here (with `env`, else this process's); its findings, launch and plan beside it."""

    def run(argv: Sequence[str], stdin: bytes | None) -> Result:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, timeout=900, check=False, env=env
        )
        return Result(tuple(argv), done.returncode, done.stdout, done.stderr)

    [plan] = plan_deploy(playbook, load_inventory(inventory))
    launch = read_launch(plan.files[LAUNCH_SCRIPT].decode(), plan.release_id)
    found = ask_server(MemoryTransport().on("validate_launch", run), plan, launch)
    return found, server_check.findings(found, launch), launch, plan
