"""`orch`: thin commands that parse, call and print. Heavy imports are deferred
into each command so `orch --help` starts fast."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from orchestrator.errors import OrchError

EXIT_CODES = """Exit codes: 0 success; 1 the change did not pass its gate or checks (rolled back
or not applied, nothing broken); 2 bad input (nothing touched); 3 needs attention
(rollback failed, host unreachable, lock held, server down)."""


class OrchGroup(click.Group):
    """Turns project errors into their message and exit code, no traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except OrchError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)


@click.group(
    cls=OrchGroup, epilog=EXIT_CODES, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(package_name="orch")
def cli() -> None:
    """Deploy and verify vLLM speculative-decoding servers on Proxmox GPU containers."""


inventory_option = click.option(
    "-i",
    "--inventory",
    "inventory_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Inventory YAML file.",
)
limit_option = click.option(
    "--limit", multiple=True, metavar="NAME", help="Only these containers or groups."
)
set_option = click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="PATH=VALUE",
    help="Override a playbook field; VALUE is YAML.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")


@cli.command()
@click.option(
    "--drafter",
    type=click.Path(path_type=Path),
    required=True,
    help="Drafter config.json or model directory.",
)
@click.option(
    "--target",
    type=click.Path(path_type=Path),
    required=True,
    help="Target config.json or model directory.",
)
@click.option(
    "--tokenizer",
    type=click.Path(path_type=Path),
    help="Target tokenizer_config.json (or its directory).",
)
@click.option("--profile", help="Built-in drafter profile to compare with (default: detected).")
@click.option("--num-speculative-tokens", type=int, help="The server's num_speculative_tokens.")
@json_option
def verify_config(
    drafter: Path,
    target: Path,
    tokenizer: Path | None,
    profile: str | None,
    num_speculative_tokens: int | None,
    as_json: bool,
) -> None:
    """Check a drafter config against its target, from local files."""
    from orchestrator import report
    from orchestrator.verify import verify_local

    findings = verify_local(drafter, target, tokenizer, profile, num_speculative_tokens)
    report.print_findings(findings, as_json=as_json)
    sys.exit(1 if report.has_errors(findings) else 0)


@cli.command()
def profiles() -> None:
    """List the built-in profiles of published drafters."""
    from orchestrator import report
    from orchestrator.drafters.profiles import list_profiles

    report.print_profiles(list_profiles())


@cli.command()
@click.argument("playbook")
@inventory_option
@limit_option
@set_option
def render(
    playbook: str, inventory_path: Path, limit: tuple[str, ...], assignments: tuple[str, ...]
) -> None:
    """Print each target's rendered drafter config and launch script."""
    from orchestrator import report
    from orchestrator.inventory import load_inventory
    from orchestrator.plan import plan_deploy
    from orchestrator.playbook import find_playbook, load_playbook

    book = load_playbook(find_playbook(playbook), list(assignments))
    plans = plan_deploy(book, load_inventory(inventory_path), list(limit))
    report.print_plans(plans)
    sys.exit(1 if any(report.has_errors(p.findings) for p in plans) else 0)


@cli.group()
def lab() -> None:
    """A local Proxmox-like cluster: real sshd, pct and vLLM stand-ins."""


lab_dir_option = click.option(
    "--dir",
    "lab_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Lab directory (default: under the user's state directory).",
)


@lab.command("up")
@lab_dir_option
@click.option("--hosts", default=1, show_default=True, help="Proxmox hosts.")
@click.option(
    "--containers-per-host",
    default=2,
    show_default=True,
    help="Containers per host; every second one is reached by direct SSH.",
)
@click.option(
    "--load-seconds",
    default=2.0,
    show_default=True,
    help="How long each vLLM stand-in refuses connections while 'loading'.",
)
@click.option(
    "--network", default="127.66", show_default=True, help="Loopback /16 for the lab's addresses."
)
def lab_up(
    lab_dir: Path | None, hosts: int, containers_per_host: int, load_seconds: float, network: str
) -> None:
    """Build and start the lab, and write its inventory."""
    from orchestrator.lab.cluster import Lab, LabSpec, default_lab_dir

    the_lab = Lab(lab_dir or default_lab_dir())
    spec = LabSpec(hosts, containers_per_host, load_seconds, network)
    started = the_lab.up(spec)
    click.echo(f"lab {'started' if started else 'already running'} in {the_lab.root}")
    click.echo(f"next: orch deploy qwen-dflash -i {the_lab.inventory}")


@lab.command("down")
@lab_dir_option
def lab_down(lab_dir: Path | None) -> None:
    """Stop every process the lab started, by PID."""
    from orchestrator.lab.cluster import Lab, default_lab_dir

    stopped = Lab(lab_dir or default_lab_dir()).down()
    click.echo(f"stopped {len(stopped)} process(es)" + (f": {stopped}" if stopped else ""))


@lab.command("status")
@lab_dir_option
@json_option
def lab_status(lab_dir: Path | None, as_json: bool) -> None:
    """Hosts, containers, their state, and the servers running in them."""
    from orchestrator import report
    from orchestrator.lab.cluster import Lab, default_lab_dir

    report.print_rows(Lab(lab_dir or default_lab_dir()).status(), as_json=as_json)


def main() -> None:
    cli(prog_name="orch")
