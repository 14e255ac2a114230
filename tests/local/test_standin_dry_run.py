"""The stand-in lab answers orch's server check as the release it claims would: a real
process (the lab's `vllm` console script and its interpreter, as `orch lab up` writes
them) over the launches the lab's playbooks render on the lab's tiny models. Where the
real vLLM 0.32.0 is installed (tests/realvllm.py), the stand-in's answers are held to
its answers on the same launches: the good ones, and the ones it refuses (the
real-server lab shows the same refusals end to end: tests/lab/test_realvllm_lab.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from realvllm import ROOT, VENV, needs_032, own_cache
from servercheck import CPU, check_launch, one_container

from orchestrator.container import validator
from orchestrator.drafters.findings import Finding, Severity
from orchestrator.lab import tiny_cache
from orchestrator.lab.paths import VLLM_VERSION_ENV, ContainerPaths, write_container_launchers
from orchestrator.playbook import load_playbook

CASES = {
    "dflash": ("lab-dflash",),
    "draft model": ("lab-draft-model",),
    "unknown speculative key": ("lab-dflash", "server.speculative_config.bogus_key=1"),
    "unreadable runner variable": ("lab-dflash", 'server.env.VLLM_USE_V2_MODEL_RUNNER="true"'),
    "windowless drafter": ("lab-dflash", "drafter.overrides.use_sliding_window=false"),
    "unknown flag": ("lab-draft-model", "server.extra_args=[--bogus-flag, '3']"),
}


def models(tmp_path: Path) -> Path:
    """The lab's tiny models as a stand-in container gets them (configs and stubs)."""
    directory = tmp_path / "models"
    tiny_cache.write_stubs(ContainerPaths(tmp_path / "truth"), directory)
    return directory


def standin_vllm(tmp_path: Path, version: str = "0.32.0") -> str:
    container = ContainerPaths(tmp_path / "ct")
    write_container_launchers(container, sys.executable, {VLLM_VERSION_ENV: version})
    return str(container.vllm)


def ask(
    tmp_path: Path, vllm: str, name: str, *assignments: str, env: dict[str, str] | None = None
) -> tuple[validator.ServerCheck, list[Finding]]:
    """The lab playbook `name` rendered for a container whose vllm is `vllm`, checked by it."""
    playbook = load_playbook(ROOT / "playbooks" / f"{name}.yaml", [CPU, *assignments])
    found, findings, _, _ = check_launch(
        playbook, one_container(tmp_path, tmp_path / "models", vllm), env
    )
    return found, findings


def verdict(found: validator.ServerCheck, findings: list[Finding]) -> dict:
    """What a check decides: each stage's status, the layers vLLM resolves, and each
    error's field and vLLM's own last line (argparse's usage line above it names the
    program's parser, which has no --version)."""
    assert found.reply is not None, found.unavailable
    return {
        "version": found.reply.version,
        "stages": {s.name: s.status for s in found.reply.stages},
        "layers": [list(s.layers) for s in found.reply.stages if s.layers],
        "errors": [
            (f.field, f.message.splitlines()[-1].strip())
            for f in findings
            if f.severity == Severity.ERROR
        ],
    }


@pytest.mark.parametrize("case", CASES)
def test_the_standin_answers_the_server_check_with_no_warning_about_itself(
    tmp_path: Path, case: str
) -> None:
    models(tmp_path)
    found, findings = ask(tmp_path, standin_vllm(tmp_path), *CASES[case])
    got = verdict(found, findings)
    assert got["version"] == "0.32.0"
    assert not [f for f in findings if f.field == "server.check"], findings
    refused = case not in ("dflash", "draft model")
    assert bool(got["errors"]) == refused, got


def test_the_standin_answers_as_the_release_it_claims(tmp_path: Path) -> None:
    """0.34.0 reads VLLM_USE_V2_MODEL_RUNNER as exactly `1` (the lab's release data)."""
    models(tmp_path)
    found, findings = ask(
        tmp_path,
        standin_vllm(tmp_path, "0.34.0"),
        "lab-dflash",
        'server.env.VLLM_USE_V2_MODEL_RUNNER="0"',
    )
    [(field, words)] = verdict(found, findings)["errors"]
    assert field == "server.env.VLLM_USE_V2_MODEL_RUNNER"
    assert "VLLM_USE_V2_MODEL_RUNNER=0 is no longer supported" in words


@pytest.mark.realvllm
@needs_032
@pytest.mark.parametrize("case", CASES)
def test_the_standins_answer_is_the_real_0_32s(tmp_path: Path, case: str) -> None:
    models(tmp_path)
    standin = verdict(*ask(tmp_path, standin_vllm(tmp_path), *CASES[case]))
    env = {**os.environ, **own_cache(VENV)}
    real = verdict(*ask(tmp_path, str(VENV / "bin" / "vllm"), *CASES[case], env=env))
    assert standin == real
