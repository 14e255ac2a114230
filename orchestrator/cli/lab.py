"""`orch lab`: the local Proxmox-like cluster the lab tests and demos run on."""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.options import (
    json_option,
)
from orchestrator.lab.paths import DEFAULT_TOKENS_PER_SECOND


@click.group()
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
    help="Containers per host.",
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
@click.option(
    "--tokens-per-second",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_TOKENS_PER_SECOND,
    show_default=True,
    help="Decode speed per stream without drafts (one engine step each 1/N s); "
    "about 30 for a 27B target on two A6000.",
)
@click.option(
    "--server",
    type=click.Choice(["standin", "vllm"]),
    default="standin",
    show_default=True,
    help="Each container's vLLM: the stand-in (fast, with version eras and fault knobs) or "
    "the real vLLM for CPUs serving tiny models made here (needs scripts/setup-vllm.sh).",
)
@click.option(
    "--vllm-version",
    metavar="VERSION",
    help="The vLLM release the stand-ins claim and behave as (default: the newest the "
    "lab's own release data knows, orchestrator/lab/vllm_releases.yaml).",
)
@click.option(
    "--direct-ssh/--all-pct",
    default=True,
    show_default=True,
    help="Every second container has its own sshd, or every container is reached by pct.",
)
@click.option(
    "--max-sessions",
    type=int,
    default=None,
    help="Raise every sshd's MaxSessions (default: OpenSSH's 10, as on a stock host).",
)
@click.option(
    "--max-startups",
    default=None,
    metavar="START:RATE:FULL",
    help="Raise every sshd's MaxStartups (default: OpenSSH's 10:30:100).",
)
@click.option(
    "--standalone",
    is_flag=True,
    help="One node that is in no cluster (pvesh's cluster status has no cluster entry).",
)
@json_option
def lab_up(
    lab_dir: Path | None,
    hosts: int,
    containers_per_host: int,
    load_seconds: float,
    network: str,
    server: str,
    vllm_version: str | None,
    direct_ssh: bool,
    max_sessions: int | None,
    max_startups: str | None,
    tokens_per_second: float,
    standalone: bool,
    as_json: bool,
) -> None:
    """Build and start the lab, and write its inventory."""
    from orchestrator.lab.cluster import Lab, LabSpec, default_lab_dir
    from orchestrator.lab.releases import default_release

    if server == "vllm" and vllm_version:
        raise click.UsageError("--vllm-version is the stand-in's; the real server is its own")
    the_lab = Lab(lab_dir or default_lab_dir())
    spec = LabSpec(
        hosts,
        containers_per_host,
        load_seconds,
        network,
        vllm_version or default_release(),
        direct_ssh,
        max_sessions,
        max_startups,
        tokens_per_second=tokens_per_second,
        standalone=standalone,
        server=server,
    )
    up = the_lab.bring_up(spec)
    if as_json:
        from orchestrator.report.screen import print_json

        print_json(up)
        return
    click.echo(
        f"lab {'started' if up.started else 'already running'} in {up.dir} "
        f"({_server_words(up.server, up.vllm_version)})"
    )
    playbook = "lab-draft-model" if up.server == "vllm" else "qwen-dflash"
    click.echo(f"next: orch deploy {playbook} -i {up.inventory}")


def _server_words(server: str, vllm_version: str) -> str:
    kind = "the real vLLM" if server == "vllm" else "vLLM stand-in"
    return f"{kind} {vllm_version}"


@lab.command("down")
@lab_dir_option
@json_option
def lab_down(lab_dir: Path | None, as_json: bool) -> None:
    """Stop every process the lab started, by PID."""
    from orchestrator.lab.cluster import Lab, default_lab_dir

    down = Lab(lab_dir or default_lab_dir()).take_down()
    if as_json:
        from orchestrator.report.screen import print_json

        print_json(down)
        return
    stopped = down.stopped
    click.echo(f"stopped {len(stopped)} process(es)" + (f": {stopped}" if stopped else ""))


@lab.command("acceptance")
@click.argument("container")
@click.argument("scale", type=click.FloatRange(0, 1))
@lab_dir_option
def lab_acceptance(container: str, scale: float, lab_dir: Path | None) -> None:
    """Scale every draft position's acceptance on CONTAINER's running servers, from now
    on and without a restart (a fault for `orch watch`; 1 restores)."""
    from orchestrator.lab.cluster import Lab, default_lab_dir

    knob = Lab(lab_dir or default_lab_dir()).set_acceptance(container, scale)
    click.echo(f"{container}: acceptance scaled by {scale:g} ({knob})")


@lab.command("status")
@lab_dir_option
@json_option
def lab_status(lab_dir: Path | None, as_json: bool) -> None:
    """Hosts, containers, their state, and the servers running in them."""
    from orchestrator.lab.cluster import Lab, default_lab_dir
    from orchestrator.report import screen, tables

    doc = Lab(lab_dir or default_lab_dir()).report()
    screen.print_json(doc) if as_json else tables.print_lab_status(doc)
