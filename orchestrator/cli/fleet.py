"""The commands that read a fleet's containers: status, releases, unlock, promote,
abort and retry (a decision for a paused run), verify-config, logs, watch and doctor."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from orchestrator import completion as complete
from orchestrator.cli.options import (
    accept_keys_option,
    fleet_read_options,
    inventory_option,
    json_choice,
    json_option,
    limit_option,
    recheck_option,
    set_option,
)
from orchestrator.errors import InputError

if TYPE_CHECKING:
    from orchestrator.container.pause import Choice
    from orchestrator.documents.fleet import FleetDocument, Status
    from orchestrator.documents.watch import Watch
    from orchestrator.fleet.inputs import Inputs


@click.command()
@click.argument("playbook", required=False, shell_complete=complete.playbooks)
@click.option(
    "-i",
    "--inventory",
    "inventory_path",
    envvar="ORCH_INVENTORY",
    type=click.Path(path_type=Path),
    help="With PLAYBOOK: check the containers' current releases.",
)
@limit_option
@set_option
@click.option(
    "--drafter",
    type=click.Path(path_type=Path),
    help="Offline: drafter config.json or model directory (none: the target's MTP layers).",
)
@click.option(
    "--target",
    type=click.Path(path_type=Path),
    help="Offline: target config.json or model directory.",
)
@click.option(
    "--tokenizer",
    type=click.Path(path_type=Path),
    help="Offline: target tokenizer_config.json (or its directory).",
)
@click.option("--profile", help="Offline: built-in drafter profile (default: detected).")
@click.option("--num-speculative-tokens", type=int, help="Offline: the server's setting.")
@click.option(
    "--server-version",
    metavar="VERSION",
    help="Offline: judge the drafter/target pair against what this vLLM version does.",
)
@click.option(
    "--server-env",
    multiple=True,
    metavar="NAME=VALUE",
    help="Offline, with --server-version: the server's launch environment.",
)
@click.option(
    "--attention-backend",
    metavar="NAME",
    help="Offline, with --server-version: the server's --attention-backend.",
)
@recheck_option
@accept_keys_option
@json_option
def verify_config(
    playbook: str | None,
    inventory_path: Path | None,
    limit: tuple[str, ...],
    assignments: tuple[str, ...],
    drafter: Path | None,
    target: Path | None,
    tokenizer: Path | None,
    profile: str | None,
    num_speculative_tokens: int | None,
    server_version: str | None,
    server_env: tuple[str, ...],
    attention_backend: str | None,
    recheck: bool,
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """Check drafter configs: on the containers (PLAYBOOK -i INVENTORY), or in local
    files (--drafter PATH --target PATH), optionally against a vLLM version."""
    from orchestrator.report import screen, tables

    if playbook:
        from orchestrator.connections import ssh
        from orchestrator.fleet.inputs import load
        from orchestrator.fleet.verify import verify_remote

        if not inventory_path:
            raise InputError("verify-config PLAYBOOK needs -i INVENTORY")
        inputs = load(playbook, inventory_path, list(limit), list(assignments), True)
        document, code = verify_remote(inputs, ssh(accept_new_host_keys), recheck)
        if as_json:
            screen.print_json(document)
        else:
            tables.print_verify(document, inputs.deploy_command())
        sys.exit(code)
    if not target:
        raise InputError(
            "verify-config needs PLAYBOOK -i INVENTORY, or --target (with --drafter, "
            "unless the target's own MTP layers draft)"
        )
    from orchestrator.fleet.verify import verify_files
    from orchestrator.verify import server_launch

    if (server_env or attention_backend) and not server_version:
        raise InputError("--server-env and --attention-backend need --server-version")
    launch = server_launch(server_env, attention_backend) if server_version else None
    checked, code = verify_files(
        drafter, target, tokenizer, profile, num_speculative_tokens, server_version, launch
    )
    screen.print_json(checked) if as_json else tables.print_findings(checked)
    sys.exit(code)


ReadDocument = TypeVar("ReadDocument", bound="FleetDocument")


def _fleet_read(
    operation: Callable[[Any, Any], tuple[ReadDocument, int]],
    printer: Callable[[ReadDocument, Any], None],
    playbook: str,
    inventory_path: Path,
    limit: tuple[str, ...],
    accept_new_host_keys: bool,
    as_json: bool,
    exit_with: Callable[[int], int] = lambda code: code,
) -> NoReturn:
    """One look at every selected container, printed as a table (given the command's
    inputs, for hints with the real paths) or one document; `exit_with`: the exit
    status for the body's exit code (a signal's own, for one that stopped it)."""
    from orchestrator.connections import ssh
    from orchestrator.fleet.inputs import load
    from orchestrator.report import screen

    inputs = load(playbook, inventory_path, list(limit), [])
    document, code = operation(inputs, ssh(accept_new_host_keys))
    screen.print_json(document) if as_json else printer(document, inputs)
    sys.exit(exit_with(code))


@click.command()
@fleet_read_options
@click.option(
    "--wait",
    is_flag=True,
    help="First wait until no run is at work on the containers and no server is still "
    "coming up (kubectl's rollout status); Ctrl-C stops the wait.",
)
@click.option(
    "--timeout",
    metavar="SPAN",
    help="With --wait: how long at most (30s, 10m, 1h; default 10m), then exit 3.",
)
def status(wait: bool, timeout: str | None, **options: Any) -> None:
    """Per container: current release, server PID and health, last gate, lock holder."""
    from orchestrator.report import tables

    def print_status(doc: Status, inputs: Inputs) -> None:
        tables.print_status(doc, inputs.deploy_command())

    if timeout is not None and not wait:
        raise click.UsageError("--timeout goes with --wait")
    if not wait:
        from orchestrator.fleet.status import status as read_status

        _fleet_read(read_status, print_status, **options)  # exits
    from orchestrator.deadline import Deadline
    from orchestrator.durations import seconds
    from orchestrator.fleet.wait import INTERRUPTED, wait_for_status
    from orchestrator.report.screen import printable

    limit = seconds(timeout or "10m", "--timeout")
    with _stop_on_signals() as stop:
        _fleet_read(
            lambda inputs, connect: wait_for_status(
                inputs,
                Deadline.after(limit, cancel=stop),
                lambda line: click.echo(printable(line), err=True),
                connect,
            ),
            print_status,
            exit_with=lambda code: 128 + stop.signum if code == INTERRUPTED else code,
            **options,
        )


@click.command()
@fleet_read_options
def releases(**options: Any) -> None:
    """Per run, newest first: the release it left each container on, and whether that
    release is current, kept or pruned, as the containers record it (their audit logs)."""
    from orchestrator.fleet.releases import releases as read_releases
    from orchestrator.report import tables

    _fleet_read(read_releases, lambda doc, _: tables.print_releases(doc), **options)


@click.command()
@fleet_read_options
@click.option(
    "--force",
    is_flag=True,
    help="Remove a lock even when its run may still be at work (its process alive here, or "
    "its heartbeat within its lease); that run stops at its next safe point.",
)
def unlock(force: bool, **options: Any) -> None:
    """Remove a stale deploy lock, showing whose it was; a live run's lock is refused
    (exit 3, naming it) unless --force."""
    from orchestrator.fleet.unlock import unlock as remove_locks
    from orchestrator.report import tables

    _fleet_read(
        lambda inputs, connect: remove_locks(inputs, connect, force),
        lambda doc, _: tables.print_unlock(doc),
        **options,
    )


def _decision(choice: Choice, summary: str) -> click.Command:
    """`orch promote|abort|retry`: one decision for the paused runs it selects."""

    @fleet_read_options
    def command(**options: Any) -> None:
        from orchestrator.fleet.decide import decide
        from orchestrator.report import tables

        _fleet_read(
            lambda inputs, connect: decide(inputs, choice, connect),
            lambda doc, _: tables.print_decide(doc),
            **options,
        )

    command.__doc__ = (
        f"{summary} A run paused on an inconclusive gate (gate.on_inconclusive: pause) "
        "acts on it at its next poll; a container with no paused run is skipped (none "
        "anywhere: exit 2)."
    )
    return click.command(choice)(command)


promote = _decision("promote", "Keep the paused release: it becomes current and gated.")
abort = _decision("abort", "Roll the paused release back, as after a failed gate.")
retry = _decision("retry", "Gate the paused release again (it may pause again).")


@click.command()
@click.argument("playbook", shell_complete=complete.playbooks)
@inventory_option
@limit_option
@click.option(
    "-n", "lines", default=20, show_default=True, type=click.IntRange(min=0), help="Last N lines."
)
@click.option("-f", "--follow", is_flag=True, help="Keep printing what is written, until Ctrl-C.")
@accept_keys_option
@json_option
def logs(
    playbook: str,
    inventory_path: Path,
    limit: tuple[str, ...],
    lines: int,
    follow: bool,
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """The current release's server log on each container (named when there are several)."""
    from orchestrator.connections import ssh
    from orchestrator.fleet.inputs import load
    from orchestrator.fleet.logs import follow_logs
    from orchestrator.fleet.logs import logs as tail_logs
    from orchestrator.report import screen

    if follow and as_json:
        raise click.UsageError("--json prints one document: it cannot --follow")
    inputs = load(playbook, inventory_path, list(limit), [])
    named = len(inputs.plans) > 1

    def emit(name: str, line: str) -> None:
        click.echo(screen.printable(f"{name}: {line}" if named else line))

    def warn(name: str, reason: str) -> None:
        click.echo(screen.printable(f"{name}: {reason}"), err=True)

    if follow:
        with _stop_on_signals() as stop:
            follow_logs(inputs, lines, emit, warn, stop, ssh(accept_new_host_keys))
        sys.exit(0)
    document, code = tail_logs(inputs, lines, ssh(accept_new_host_keys))
    if as_json:
        screen.print_json(document)
    else:
        for target in document.targets:
            reason = target.error or target.note
            if reason:
                warn(target.name, reason)
            for line in target.lines:
                emit(target.name, line)
    sys.exit(code)


class Stop(threading.Event):
    """Set by the first SIGINT or SIGTERM, which it keeps (`signum`)."""

    signum = signal.SIGINT

    def by(self, signum: int) -> None:
        if not self.is_set():
            self.signum = signal.Signals(signum)
        self.set()


@contextmanager
def _stop_on_signals() -> Iterator[Stop]:
    """SIGINT and SIGTERM end a follow or a wait at its next round, as its normal end."""
    stop = Stop()
    previous = {
        s: signal.signal(s, lambda signum, _: stop.by(signum))
        for s in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@click.command()
@click.argument("playbook", shell_complete=complete.playbooks)
@inventory_option
@limit_option
@set_option
@click.option(
    "--interval", default="5s", show_default=True, help="Seconds (or 2s, 1m) between scrapes."
)
@click.option(
    "--window",
    default="1m",
    show_default=True,
    help="The sliding window the rates are taken over (30s, 5m, or seconds).",
)
@click.option(
    "--once", is_flag=True, help="Watch one window, print it, exit 1 if any container is below."
)
@accept_keys_option
@json_choice("One JSON document per line, each round (one Error document on bad input).")
def watch(
    playbook: str,
    inventory_path: Path,
    limit: tuple[str, ...],
    assignments: tuple[str, ...],
    interval: str,
    window: str,
    once: bool,
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """Live acceptance per container (mean length, position-1 rate, drafts/s) from the
    servers' counters over a sliding window, against the playbook's gate thresholds;
    a container below them is marked BELOW (with --once: exit 1)."""
    from orchestrator.connections import ssh
    from orchestrator.durations import seconds
    from orchestrator.fleet import watch as live
    from orchestrator.fleet.inputs import load
    from orchestrator.report.screen import print_json_line, printable

    every, span = seconds(interval, "--interval"), seconds(window, "--window")
    inputs = load(playbook, inventory_path, list(limit), list(assignments))

    def emit(doc: Watch) -> None:
        if as_json:
            print_json_line(doc)
            return
        if not once:
            click.echo(f"-- {doc.time[11:19]} (window {doc.window_seconds:g} s)")
        for line in live.lines(doc):
            click.echo(printable(line))

    with _stop_on_signals() as stop:
        code = live.watch_fleet(
            inputs, every, span, once, emit, stop.wait, ssh(accept_new_host_keys)
        )
    sys.exit(code if once else 0)


@click.command()
@click.argument("playbook", required=False, shell_complete=complete.playbooks)
@inventory_option
@limit_option
@set_option
@recheck_option
@accept_keys_option
@json_option
def doctor(
    playbook: str | None,
    inventory_path: Path,
    limit: tuple[str, ...],
    assignments: tuple[str, ...],
    recheck: bool,
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """Read-only: is everything a deploy needs there? Logins, containers, GPUs, and with
    PLAYBOOK the server command, model dirs and disk; one line per check, with the fix."""
    from orchestrator.connections import ssh
    from orchestrator.fleet.doctor import doctor as check
    from orchestrator.report import screen, tables

    document, code = check(
        inventory_path,
        playbook,
        list(limit),
        list(assignments),
        ssh(accept_new_host_keys),
        recheck,
    )
    screen.print_json(document) if as_json else tables.print_doctor(document)
    sys.exit(code)
