"""orch installed from a wheel into a fresh venv, run from a directory outside the clone:
templates, playbooks and probe data must ship inside the package."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import free_network
from orchrun import ROOT

from orchestrator.lab.cluster import Lab
from orchestrator.lab.paths import pid_alive

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ directory of a fresh venv with orch installed from its wheel."""
    work = tmp_path_factory.mktemp("install")
    wheels = work / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", wheels, ROOT], check=True, cwd=work)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    wheel = next(wheels.glob("orch-*.whl"))
    subprocess.run(
        [
            venv / "bin" / "python",
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            wheel,
        ],
        check=True,
        cwd=work,
    )
    return venv / "bin"


def run(bin_dir: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(cwd), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [bin_dir / "orch", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[Path]:
    """A working directory with nothing of the clone in it; any lab there is stopped."""
    yield tmp_path
    lab = Lab(tmp_path / "lab")
    assert all(not pid_alive(pid) for pid in lab.down())


def test_wheel_renders_lists_profiles_and_deploys_on_a_lab(
    installed: Path, elsewhere: Path
) -> None:
    where = subprocess.run(
        [installed / "python", "-c", "import orchestrator; print(orchestrator.__file__)"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), "not the wheel's copy"
    profiles = run(installed, "profiles", cwd=elsewhere)
    assert profiles.returncode == 0, profiles.stderr
    assert "z-lab/Qwen3.6-27B-DFlash" in profiles.stdout

    up = run(installed, "lab", "up", "--dir", "lab", "--network", free_network(), cwd=elsewhere)
    assert up.returncode == 0, up.stderr
    inventory = elsewhere / "lab" / "inventory.yaml"

    rendered = run(installed, "render", "qwen-dflash", "-i", inventory, cwd=elsewhere)
    assert rendered.returncode == 0, rendered.stderr
    assert "--speculative-config" in rendered.stdout

    deployed = run(installed, "deploy", "qwen-dflash", "-i", inventory, "--json", cwd=elsewhere)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert '"deployed"' in deployed.stdout
