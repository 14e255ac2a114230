"""A release's rendered files from the example playbook, and the two release directories
the release tests write them to."""

from __future__ import annotations

import functools
from pathlib import Path

from orchestrator.inventory import load_inventory
from orchestrator.plan import DRAFTER_CONFIG, plan_deploy
from orchestrator.playbook import load_playbook

ROOT = Path(__file__).resolve().parent.parent
VIEW_CONFIG = f"drafter/{DRAFTER_CONFIG}"


@functools.cache
def release_files() -> dict[str, bytes]:
    """What release.verify expects back: the plan's files plus the drafter view's config."""
    playbook = load_playbook(ROOT / "playbooks" / "qwen-dflash.yaml")
    [plan] = plan_deploy(playbook, load_inventory(ROOT / "inventories" / "example.yaml"), ["ct129"])
    return {**plan.files, VIEW_CONFIG: plan.files[DRAFTER_CONFIG]}


# --- what a deploy changes, as `diff -u` shows it ------------------------------------------------

CURRENT_DIR = "/var/lib/orch/qwen-dflash/releases/old"
NEW_DIR = "/var/lib/orch/qwen-dflash/releases/new"
