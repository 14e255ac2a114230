"""The options several commands share: the inventory, `--limit`, `--set`, the JSON
choice and host keys, and the argument sets of the fleet commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from orchestrator import completion as complete

RAW_ARGS = "orch.args"


OUTPUT = "orch.output"


def wants_json(args: list[str]) -> bool:
    """Whether the command line asks for JSON: `--json`, `-o json`, `-ojson`, `--output=json`."""
    pairs = zip(args, [*args[1:], ""], strict=True)
    return any(
        a == "--json"
        or a in ("-ojson", "--output=json")
        or (a in ("-o", "--output") and b == "json")
        for a, b in pairs
    )


class InventoryOption(click.Option):
    """-i: a missing inventory names the other two places it can come from."""

    def get_error_hint(self, ctx: click.Context | None) -> str:
        return (
            f"{super().get_error_hint(ctx)} (or set ORCH_INVENTORY, or `inventory:` in "
            "$XDG_CONFIG_HOME/orch/config.yaml)"
        )


inventory_option = click.option(
    "-i",
    "--inventory",
    "inventory_path",
    cls=InventoryOption,
    required=True,
    envvar="ORCH_INVENTORY",
    type=click.Path(path_type=Path),
    help="Inventory YAML file (default: $ORCH_INVENTORY, then `inventory` in the config file).",
)


limit_option = click.option(
    "-l",
    "--limit",
    multiple=True,
    metavar="PATTERN",
    shell_complete=complete.limit_patterns,
    help="Only these containers, as Ansible's patterns: names, groups, globs, ~regex, "
    "comma lists, &intersections, !exclusions.",
)


set_option = click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="PATH=VALUE",
    help="Override a playbook field; VALUE is YAML.",
)


def _remember_output(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.meta[OUTPUT] = value


file_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document (also on errors)."
)
"""`--json` alone, for the commands whose `-o` names a file to write."""


def json_choice(
    help_text: str = "Print one JSON document (also on errors).",
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """`--json`, and `-o json|table` (kubectl's spelling) for the same choice."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        as_json = click.option(
            "--json",
            "as_json",
            is_flag=True,
            callback=lambda ctx, _p, value: bool(value) or ctx.meta.get(OUTPUT) == "json",
            help=help_text,
        )
        output = click.option(
            "-o",
            "--output",
            type=click.Choice(["json", "table"]),
            expose_value=False,
            is_eager=True,
            callback=_remember_output,
            help="json: as --json; table: for people (the default).",
        )
        return output(as_json(command))

    return decorate


json_option = json_choice()


accept_keys_option = click.option(
    "--accept-new-host-keys",
    is_flag=True,
    help="Trust and record host keys never seen before (changed keys are still refused).",
)

recheck_option = click.option(
    "--recheck",
    is_flag=True,
    help="Run the target's vLLM over the launch even where its passing verdict on this "
    "launch and this install is kept.",
)


def fleet_read_options(command: Callable[..., None]) -> Callable[..., None]:
    """PLAYBOOK -i INVENTORY [--limit] [--accept-new-host-keys] [--json]."""
    options: list[Callable[[Any], Any]] = [
        click.argument("playbook", shell_complete=complete.playbooks),
        inventory_option,
        limit_option,
        accept_keys_option,
        json_option,
    ]
    for option in reversed(options):
        command = option(command)
    return command


def server_action_options(command: Callable[..., None]) -> Callable[..., None]:
    """PLAYBOOK -i INVENTORY [--limit] [--set] [--accept-new-host-keys] [--json]: the
    server actions', `orch diff`'s and `orch baseline`'s."""
    return fleet_read_options(set_option(command))
