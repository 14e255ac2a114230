"""Where a command finds its inventory when -i is not given, and shell completion."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from orchrun import PLAIN, ROOT, RunResult
from orchrun import orch as run_orch

EXAMPLE = ROOT / "inventories" / "example.yaml"


def orch(*args: str, **env: str) -> RunResult:
    return run_orch(*args, env={**PLAIN, **env})


def config_home(tmp_path: Path, text: str) -> str:
    (tmp_path / "orch").mkdir()
    (tmp_path / "orch" / "config.yaml").write_text(text)
    return str(tmp_path)


def rendered_containers(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.code == 0, str(done)
    return [name for name in ("ct129", "ct200") if f"{name} on " in done.stdout]


def test_inventory_from_the_environment(tmp_path: Path) -> None:
    done = orch(
        "render",
        "qwen-dflash",
        "--limit",
        "ct200",
        ORCH_INVENTORY=str(EXAMPLE),
        XDG_CONFIG_HOME=str(tmp_path),
    )
    assert rendered_containers(done) == ["ct200"]


def test_inventory_from_the_config_file_relative_to_it(tmp_path: Path) -> None:
    (tmp_path / "inv.yaml").write_text(EXAMPLE.read_text())
    home = config_home(tmp_path, "inventory: ../inv.yaml\n")
    assert rendered_containers(orch("render", "qwen-dflash", XDG_CONFIG_HOME=home)) == [
        "ct129",
        "ct200",
    ]


def test_flag_beats_environment_beats_config_file(tmp_path: Path) -> None:
    home = config_home(tmp_path, "inventory: /nowhere/config.yaml\n")
    from_env = orch("render", "qwen-dflash", XDG_CONFIG_HOME=home, ORCH_INVENTORY="/nowhere/env")
    assert from_env.code == 2
    assert "/nowhere/env" in from_env.stderr
    from_flag = orch(
        "render",
        "qwen-dflash",
        "-i",
        str(EXAMPLE),
        XDG_CONFIG_HOME=home,
        ORCH_INVENTORY="/nowhere/env",
    )
    assert from_flag.code == 0, str(from_flag)


def test_no_inventory_anywhere_is_a_usage_error(tmp_path: Path) -> None:
    done = orch("render", "qwen-dflash", XDG_CONFIG_HOME=str(tmp_path))
    assert done.code == 2
    assert "Missing option '-i'" in done.stderr


def test_bad_config_file_names_its_line_and_field(tmp_path: Path) -> None:
    home = config_home(tmp_path, "# defaults\ninventry: x.yaml\n")
    done = orch("render", "qwen-dflash", XDG_CONFIG_HOME=home)
    assert done.code == 2
    assert f"{home}/orch/config.yaml:2:1: inventry:" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell: str) -> None:
    done = orch("completion", shell)
    assert done.code == 0, str(done)
    assert "_ORCH_COMPLETE" in done.stdout


def test_bash_completion_script_parses_and_completes_commands(tmp_path: Path) -> None:
    script = orch("completion", "bash").stdout
    checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    completed = subprocess.run(
        [sys.executable, "-m", "orchestrator"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "XDG_CONFIG_HOME": str(tmp_path),
            "_ORCH_COMPLETE": "bash_complete",
            "COMP_WORDS": "orch dep",
            "COMP_CWORD": "1",
        },
    )
    assert completed.stdout.splitlines() == ["plain,deploy"]
