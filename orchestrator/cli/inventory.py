"""`orch inventory`: inventories written from what a cluster reports, or from
another tool's."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from orchestrator.cli.options import (
    accept_keys_option,
    file_json_option,
)
from orchestrator.errors import NeedsAttention


@click.group()
def inventory() -> None:
    """Write inventories from what a cluster reports, or from another tool's."""


inventory_output_option = click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Inventory file to create (default: print it).",
)


replace_option = click.option("--force", is_flag=True, help="Replace the output file if it exists.")


@inventory.command("discover")
@click.option("--address", required=True, help="A Proxmox VE host of the cluster.")
@click.option("--port", type=int, help="Its SSH port (default: 22 or ~/.ssh/config).")
@click.option("--user", help="Login user (default: yours, or ~/.ssh/config).")
@click.option("--identity-file", type=click.Path(path_type=Path), help="Private key file.")
@click.option(
    "--known-hosts",
    type=click.Path(path_type=Path),
    help="known_hosts file (default: ~/.ssh/known_hosts).",
)
@inventory_output_option
@replace_option
@click.option(
    "--become", type=click.Choice(["sudo"]), help="Run pvesh and pct through sudo -n (non-root)."
)
@click.option("--jump", metavar="[USER@]HOST[:PORT]", help="Reach the host through this one.")
@accept_keys_option
@file_json_option
def inventory_discover(
    address: str,
    port: int | None,
    user: str | None,
    identity_file: Path | None,
    known_hosts: Path | None,
    output: Path | None,
    force: bool,
    become: str | None,
    jump: str | None,
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """List the cluster's nodes and containers from one of its hosts (pvesh there, then
    pct config and nvidia-smi on each node) and write an inventory for them. A node
    that cannot be reached directly is read through this host as jump host; exit 3
    when a node could not be read (the inventory is still written, saying which)."""
    from orchestrator.discovery.run import discover, login_settings, ssh_nodes, write_new
    from orchestrator.discovery.writer import inventory_text

    login = login_settings(
        address,
        {
            "port": port,
            "user": user,
            "identity_file": identity_file,
            "known_hosts": known_hosts,
            "become": become,
            "jump": jump,
        },
    )
    cluster = discover(address, login, ssh_nodes(accept_new_host_keys))
    command = f"orch inventory discover --address {address}" + (f" --port {port}" if port else "")
    text = inventory_text(cluster, login, command)
    if output is not None:
        write_new(output, text, force)
    if as_json:
        from orchestrator.discovery.run import discovered_document
        from orchestrator.report.screen import print_json

        print_json(discovered_document(cluster, output, text))
    elif output is None:
        click.echo(text, nl=False)
    else:
        read = ", ".join(node.name for node in cluster.read)
        click.echo(f"wrote {output}: {len(cluster.containers)} container(s) on {read}")
    if cluster.unread:
        if not as_json:
            from orchestrator.report.screen import printable

            for name, why in cluster.unread.items():  # the detail quotes the node's own words
                click.echo(printable(f"warning: node {name} not read: {why.detail}"), err=True)
        sys.exit(NeedsAttention.exit_code)


@inventory.group("import")
def inventory_import() -> None:
    """Write an orch inventory from another tool's."""


@inventory_import.command("ansible")
@click.argument("source", metavar="FILE", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "source_format",
    type=click.Choice(["ini", "yaml"]),
    help="The file's format (default: by extension, else YAML when it is a mapping).",
)
@inventory_output_option
@replace_option
@file_json_option
def inventory_import_ansible(
    source: Path, source_format: str | None, output: Path | None, force: bool, as_json: bool
) -> None:
    """An Ansible inventory (YAML or INI) as an orch inventory: Proxmox nodes as hosts,
    hosts with proxmox_vmid as containers, their groups; what does not map is said on
    stderr (and in the file's header)."""
    import shlex

    from orchestrator.ansible.convert import convert, read
    from orchestrator.discovery.run import write_new
    from orchestrator.report.screen import printable
    from orchestrator.yamlsource import read_config_text

    text, _ = read_config_text(source)
    command = shlex.join(["orch", "inventory", "import", "ansible", str(source)])
    imported = convert(read(str(source), text, source_format), command)
    for note in imported.notes:
        click.echo(printable(f"note: {note}"), err=True)
    if output is not None:
        write_new(output, imported.text, force)
    if as_json:
        from orchestrator.documents.inventory import InventoryImport
        from orchestrator.report.screen import print_json

        print_json(InventoryImport.of(source, output, imported))
    elif output is None:
        click.echo(imported.text, nl=False)
    else:
        click.echo(
            f"wrote {output}: {len(imported.hosts)} host(s), "
            f"{len(imported.containers)} container(s), {len(imported.notes)} note(s)"
        )
