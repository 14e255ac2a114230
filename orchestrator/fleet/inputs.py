"""What every fleet command starts from: the playbook, the inventory and the plans
rendered from them, loaded (bad input is an InputError before anything connects)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import InputError
from orchestrator.inventory import Inventory, load_inventory
from orchestrator.plan import TargetPlan, plan_deploy
from orchestrator.playbook import Playbook, find_playbook, load_playbook
from orchestrator.secrets import resolve as resolve_secrets


@dataclass(frozen=True)
class Inputs:
    playbook: Playbook
    inventory: Inventory
    plans: list[TargetPlan]
    playbook_ref: str
    """The playbook as the user named it (a name or a path)."""
    inventory_path: Path

    def deploy_command(self, container: str | None = None) -> str:
        """`orch deploy PLAYBOOK -i INVENTORY [--limit C] [--set ...]` with the paths and
        values given here, for a hint the operator can paste."""
        sets = [arg for a in self.playbook.assignments for arg in ("--set", a)]
        limit = ["--limit", container] if container else []
        inventory = str(self.inventory_path)
        return shlex.join(["orch", "deploy", self.playbook_ref, "-i", inventory, *limit, *sets])


def load(
    playbook: str,
    inventory: Path,
    limit: list[str],
    assignments: list[str],
    with_secrets: bool = False,
) -> Inputs:
    """`with_secrets` reads the playbook's secrets now (a command that writes or compares
    releases needs them; one that only reads the containers does not)."""
    book = load_playbook(find_playbook(playbook), assignments)
    inv = load_inventory(inventory)
    values = resolve_secrets(book) if with_secrets else None
    return Inputs(book, inv, plan_deploy(book, inv, limit, values), playbook, inventory)


def check_replace(inputs: Inputs, other: str) -> None:
    """`--replace` names another playbook that loads: bad input before anything is touched."""
    book = load_playbook(find_playbook(other), [])
    if book.name == inputs.playbook.name:
        raise InputError(f"--replace {other}: that is the playbook being deployed")
