"""The repository's example playbook and inventory, and the plans orch makes of them: for
the tests that need a real plan."""

from __future__ import annotations

from pathlib import Path

from orchestrator.inventory import load_inventory
from orchestrator.plan import TargetPlan, plan_deploy
from orchestrator.playbook import load_playbook

ROOT = Path(__file__).resolve().parent.parent
PLAYBOOK = ROOT / "playbooks" / "qwen-dflash.yaml"
EXAMPLE = ROOT / "inventories" / "example.yaml"


def plans(*assignments: str, inventory: Path = EXAMPLE) -> dict[str, TargetPlan]:
    playbook = load_playbook(PLAYBOOK, list(assignments))
    return {p.container: p for p in plan_deploy(playbook, load_inventory(inventory))}
