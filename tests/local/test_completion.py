"""Completion of names: playbooks, --limit from the inventory in use, run ids."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from recorded import record_json

from orchestrator import completion
from orchestrator.cli import cli
from orchestrator.history import History

INVENTORY = """\
defaults: {user: root}
hosts:
  pve1: {address: 192.0.2.1}
containers:
  ct200: {host: pve1, vmid: 200, access: pct, address: 192.0.2.200}
  ct201: {host: pve1, vmid: 201, access: pct, address: 192.0.2.201}
  web9: {host: pve1, vmid: 209, access: pct, address: 192.0.2.209}
groups:
  gpu: [ct200, ct201]
"""


def values(items: list) -> list[str]:
    return [item.value for item in items]


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return path


def context(**params: object) -> click.Context:
    ctx = click.Context(cli)
    ctx.params.update(params)
    return ctx


def test_playbook_names() -> None:
    names = values(completion.playbooks(context(), None, "qwen-"))  # type: ignore[arg-type]
    assert "qwen-dflash" in names and all(n.startswith("qwen-") for n in names)
    typed = completion.playbooks(context(), None, "./my")  # type: ignore[arg-type]
    assert [(i.value, i.type) for i in typed] == [("./my", "file")]


def test_limit_completes_containers_and_groups_of_the_inventory(inventory: Path) -> None:
    ctx = context(inventory_path=inventory)
    complete = completion.limit_patterns
    assert values(complete(ctx, None, "ct")) == ["ct200", "ct201"]  # type: ignore[arg-type]
    assert values(complete(ctx, None, "g")) == ["gpu"]  # type: ignore[arg-type]
    assert values(complete(ctx, None, "gpu,!ct20")) == ["gpu,!ct200", "gpu,!ct201"]  # type: ignore[arg-type]
    assert complete(context(inventory_path=inventory.parent / "none.yaml"), None, "") == []  # type: ignore[arg-type]


def test_run_ids_newest_first_and_of_the_playbook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path))
    assert completion.run_ids(context(), None, "") == []  # type: ignore[arg-type]
    for run_id, playbook, started in [
        ("20261201T100000Z-aaaaaa", "qwen-dflash", "2026-12-01T10:00:00+00:00"),
        ("20261202T100000Z-bbbbbb", "qwen-mtp", "2026-12-02T10:00:00+00:00"),
    ]:
        doc = {"run_id": run_id, "playbook": playbook, "started": started, "result": "ok"}
        record_json(History(), {**doc, "targets": []}, "deploy", "ops")
    every = completion.run_ids(context(), None, "2026")  # type: ignore[arg-type]
    assert [(i.value, i.help) for i in every] == [
        ("20261202T100000Z-bbbbbb", "qwen-mtp"),
        ("20261201T100000Z-aaaaaa", "qwen-dflash"),
    ]
    mine = completion.run_ids(context(playbook="qwen-dflash"), None, "")  # type: ignore[arg-type]
    assert values(mine) == ["20261201T100000Z-aaaaaa"]


def test_a_real_bash_completes_limit_from_the_inventory(inventory: Path, tmp_path: Path) -> None:
    """bash sources `orch completion bash` and runs its function as on a Tab press."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "orch").write_text(f'#!/bin/sh\nexec {sys.executable} -m orchestrator "$@"\n')
    (bindir / "orch").chmod(0o755)
    script = subprocess.run(
        [bindir / "orch", "completion", "bash"], capture_output=True, text=True, check=True
    ).stdout
    line = ["orch", "deploy", "qwen-dflash", "-i", str(inventory), "--limit", "gpu,ct2"]
    program = (
        f"{script}\nCOMP_WORDS=({' '.join(line)})\nCOMP_CWORD={len(line) - 1}\n"
        "_orch_completion orch\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "ORCH_STATE_DIR": str(tmp_path)}
    done = subprocess.run(
        ["bash", "--norc", "-c", program], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["gpu,ct200", "gpu,ct201"]
