"""Names the shell completes (click's `shell_complete` on parameters, so bash, zsh and
fish alike): playbook names, the containers and groups of the inventory in use for
`--limit`, run ids from the local history. A completion never fails: a file it cannot
read completes nothing. Also the script a shell sources to ask for them, as text or as
the `Completion` document."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.shell_completion import CompletionItem

from orchestrator.errors import OrchError

if TYPE_CHECKING:
    from orchestrator.documents.local import Completion

PROGRAM, COMPLETE_VARIABLE = "orch", "_ORCH_COMPLETE"
"""The program name the script completes and the variable click's completion reads."""


def script(root: click.Command, shell: str) -> str:
    """The script that completes `root`'s commands in `shell` (click's own, for bash,
    zsh or fish): `eval "$(orch completion bash)"` installs it."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None  # every shell the command offers is one click ships
    return completer(root, {}, PROGRAM, COMPLETE_VARIABLE).source()


def document(root: click.Command, shell: str) -> Completion:
    """`orch completion SHELL --json`: the shell and its script."""
    from orchestrator.documents.local import Completion

    return Completion(shell=shell, script=script(root, shell))


def playbooks(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The shipped playbooks by name; a path being typed is left to the shell's files."""
    from orchestrator.playbook import PLAYBOOK_DIR

    if os.sep in incomplete or incomplete.startswith("."):
        return [CompletionItem(incomplete, type="file")]
    names = sorted(p.stem for p in PLAYBOOK_DIR.glob("*.yaml"))
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


def _inventory_in_use(ctx: click.Context) -> Path | None:
    """-i as typed so far, else $ORCH_INVENTORY, else the config file's."""
    given = ctx.params.get("inventory_path") or os.environ.get("ORCH_INVENTORY")
    if given:
        return Path(given)
    from orchestrator.settings import default_inventory

    try:
        return default_inventory()
    except OrchError:
        return None


def limit_patterns(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Container and group names for the last item of a comma list (`!` kept)."""
    path = _inventory_in_use(ctx)
    if path is None:
        return []
    from orchestrator.inventory import load_inventory

    try:
        inventory = load_inventory(path)
    except (OrchError, OSError):
        return []
    head, _, last = incomplete.rpartition(",")
    prefix = (head + "," if head else "") + ("!" if last.startswith("!") else "")
    wanted = last.removeprefix("!")
    named = [(n, "container") for n in inventory.containers] + [
        (g, "group") for g in inventory.groups
    ]
    return [CompletionItem(prefix + n, help=kind) for n, kind in named if n.startswith(wanted)]


def run_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Run ids of the local history, newest first, each with its playbook; for a command
    about one playbook, that playbook's runs only."""
    from orchestrator.history import History

    playbook = ctx.params.get("playbook")
    try:
        runs = History().run_ids()
    except (OrchError, OSError, sqlite3.Error):
        return []
    mine = {playbook, Path(playbook).stem} if playbook else None
    return [
        CompletionItem(run_id, help=name)
        for run_id, name in runs
        if run_id.startswith(incomplete) and (mine is None or name in mine)
    ]
