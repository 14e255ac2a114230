"""Hostile text on the lab: what a container or a flag holds is printed or refused, never run."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from labtools import LabHandle

pytestmark = pytest.mark.lab

OWNER = "mallory [/] [bold red]x[/bold red] [link=http://e]y \x1b[2J"
SHOWN = "mallory [/] [bold red]x[/bold red] [link=http://e]y \\x1b[2J"


def test_lock_owner_with_markup_is_printed_verbatim_by_deploy_and_status(lab: LabHandle) -> None:
    lock = lab.deployment_dir("ct200") / "lock"
    lock.mkdir(parents=True)
    # Raw, as a hostile or broken writer may leave it: JSON would escape the terminal escape.
    (lock / "owner.json").write_text(f'{{"user": "{OWNER}", "run_id": "r1"}}')
    args = ("qwen-dflash", "-i", str(lab.inventory), "--limit", "ct200")
    deploy = lab.orch("deploy", *args)
    assert deploy.code == 3
    assert "Traceback" not in deploy.stderr
    output = deploy.stdout + deploy.stderr
    assert SHOWN in output and "\x1b" not in output
    status = lab.orch("status", *args)
    assert "Traceback" not in status.stderr
    assert SHOWN in status.stdout and "\x1b" not in status.stdout
    silent = time.time() - 3600  # the owner's run silent beyond the default lease: gone
    os.utime(lock / "owner.json", (silent, silent))
    unlock = lab.orch("unlock", *args)
    assert unlock.code == 0
    assert SHOWN in unlock.stdout


def test_template_payload_in_a_deploy_creates_nothing(
    shared_lab: LabHandle, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    payload = f'{{{{ cycler.__init__.__globals__.os.system("touch {marker}") }}}}'
    result = shared_lab.orch(
        "deploy",
        "qwen-dflash",
        "-i",
        str(shared_lab.inventory),
        "--set",
        f"target.path={json.dumps(payload)}",
    )
    assert result.code == 2
    assert "not allowed in a template" in result.stderr
    assert "Traceback" not in result.stderr
    assert not marker.exists()
    for name in ("ct200", "ct201"):
        assert not shared_lab.deployment_dir(name).exists()
