"""The commands that change containers: deploy (and `orch diff`, its dry run),
rollback, the server actions stop, start, restart, remove, and the baseline."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from orchestrator import completion as complete
from orchestrator.cli.options import (
    accept_keys_option,
    inventory_option,
    json_option,
    limit_option,
    recheck_option,
    server_action_options,
    set_option,
)

if TYPE_CHECKING:
    from orchestrator.contract import Action
    from orchestrator.documents.runs import DeployRun


@click.command()
@click.argument("playbook", shell_complete=complete.playbooks)
@inventory_option
@limit_option
@set_option
@click.option(
    "--dry-run",
    "--check",
    "-C",
    "dry_run",
    is_flag=True,
    help="Connect and preflight, change nothing; exit 1 when preflight finds an error.",
)
@click.option(
    "--diff",
    is_flag=True,
    help="Show each file's `diff -u` against the current release (before the switch).",
)
@click.option("--force", is_flag=True, help="Deploy despite preflight errors (recorded).")
@click.option(
    "--replace",
    metavar="PLAYBOOK",
    shell_complete=complete.playbooks,
    help="Stop this other playbook's server on each container as part of the transaction "
    "(it frees the port and GPUs), and start it again if the new release fails its gate.",
)
@recheck_option
@accept_keys_option
@json_option
def deploy(
    playbook: str,
    inventory_path: Path,
    limit: tuple[str, ...],
    assignments: tuple[str, ...],
    dry_run: bool,
    diff: bool,
    force: bool,
    replace: str | None,
    recheck: bool,
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """Render, push, verify, restart, gate; roll back by itself when the gate fails.
    The playbook's hooks run before and after (not with --dry-run)."""
    from orchestrator.fleet.hooks import Hooks
    from orchestrator.fleet.inputs import check_replace, load
    from orchestrator.fleet.skeleton import new_options
    from orchestrator.report import run as run_report
    from orchestrator.report import screen

    inputs = load(playbook, inventory_path, list(limit), list(assignments), True)
    if replace is not None:
        check_replace(inputs, replace)
    options = new_options(
        force=force,
        dry_run=dry_run,
        diff=diff,
        replace=replace,
        recheck=recheck,
        inventory=str(inventory_path),
    )
    hooks = None if dry_run else Hooks.for_run("deploy", inputs, options, _say)
    if hooks:
        hooks.before_deploy()
    document, code = _run_deploy(inputs, options, accept_new_host_keys, as_json)
    if hooks:
        code = hooks.after_run(document, code)
    if as_json:
        screen.print_json(document)
    else:  # a dry run's diff is the result: the summary goes beside the progress
        run_report.print_run(document, stderr=dry_run and diff)
    sys.exit(code)


def _run_deploy(
    inputs: Any, options: Any, accept_new_host_keys: bool, as_json: bool
) -> tuple[DeployRun, int]:
    """A deploy or its dry run, with the step view, stop signals and each container's
    diff printed as it comes."""
    from orchestrator.connections import ssh
    from orchestrator.fleet import runs
    from orchestrator.report import live

    with _stoppable(inputs, as_json) as (view, cancel):
        return runs.deploy(
            inputs,
            options,
            ssh(accept_new_host_keys),
            view,
            cancel,
            live.DiffPrinter(view, as_json),
        )


def _say(message: str) -> None:
    """A line on stderr, from anywhere, shown as text."""
    from orchestrator.report.screen import printable

    click.echo(printable(message), err=True)


@contextmanager
def _stoppable(inputs: Any, as_json: bool) -> Iterator[tuple[Any, Any]]:
    """The step view, and SIGINT/SIGTERM turned into a stop at the next safe point
    (click would turn Ctrl-C into 'Aborted!' and exit 1)."""
    from orchestrator.cancel import Cancel, on_signals
    from orchestrator.report import live

    def say(message: str) -> None:
        click.echo(message, err=True)

    names = [p.container for p in inputs.plans]
    with (
        live.StepView(names) as view,
        on_signals(Cancel(), say, view.describe) as cancel,
    ):
        yield view, cancel


@click.command()
@click.argument("playbook", shell_complete=complete.playbooks)
@inventory_option
@limit_option
@set_option
@click.option(
    "--to",
    "to_release",
    metavar="ID",
    shell_complete=complete.run_ids,
    help="A run id (every container back to what that run left it on), a release id, or a "
    "unique prefix of either (see `orch releases`). Default: each container's previous release.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Roll back to a release whose files no longer match its manifest (changed by hand).",
)
@accept_keys_option
@json_option
def rollback(
    playbook: str,
    inventory_path: Path,
    limit: tuple[str, ...],
    assignments: tuple[str, ...],
    to_release: str | None,
    force: bool,
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """Switch back to an earlier release, wait until ready, and gate it; with --to RUN_ID
    the whole fleet goes back to that run's state (containers it did not touch are skipped)."""
    from orchestrator.connections import ssh
    from orchestrator.fleet import runs
    from orchestrator.fleet.hooks import Hooks
    from orchestrator.fleet.inputs import load
    from orchestrator.fleet.skeleton import new_options
    from orchestrator.report import run as run_report
    from orchestrator.report import screen

    inputs = load(playbook, inventory_path, list(limit), list(assignments))
    options = new_options(force=force)
    hooks = Hooks.for_run("rollback", inputs, options, _say)  # a missing program: bad input
    with _stoppable(inputs, as_json) as (view, cancel):
        document, code = runs.rollback(
            inputs, options, to_release, ssh(accept_new_host_keys), view, cancel
        )
    code = hooks.after_run(document, code)
    screen.print_json(document) if as_json else run_report.print_run(document)
    sys.exit(code)


@click.command()
@server_action_options
@recheck_option
def baseline(
    playbook: str,
    inventory_path: Path,
    limit: tuple[str, ...],
    assignments: tuple[str, ...],
    accept_new_host_keys: bool,
    as_json: bool,
    recheck: bool,
) -> None:
    """Serve the same target with the same launch minus the speculative config, measure
    its speed at gate.speed's levels and record it with its fingerprint (the reference a
    later gate judges speedup by), then serve and gate the gated release again, in the
    rollout's order. Interrupted at any step, it ends on the gated release."""
    from orchestrator.connections import ssh
    from orchestrator.fleet.baseline import baseline as measure
    from orchestrator.fleet.inputs import load
    from orchestrator.fleet.skeleton import new_options
    from orchestrator.report import run as run_report
    from orchestrator.report import screen

    inputs = load(playbook, inventory_path, list(limit), list(assignments))
    options = new_options(inventory=str(inventory_path), recheck=recheck)
    with _stoppable(inputs, as_json) as (view, cancel):
        document, code = measure(inputs, options, ssh(accept_new_host_keys), view, cancel)
    screen.print_json(document) if as_json else run_report.print_run(document)
    sys.exit(code)


@click.command("diff")
@server_action_options
@recheck_option
def diff_command(
    playbook: str,
    inventory_path: Path,
    limit: tuple[str, ...],
    assignments: tuple[str, ...],
    recheck: bool,
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """What a deploy would change, as `kubectl diff` says it: stdout is one unified patch
    of every container's files (current against new) and nothing else, the summary goes
    to stderr; exit 0 when nothing would change, 1 when something would, 2 or more on an
    error (a preflight error included). Connects, takes no lock, changes nothing."""
    from orchestrator.fleet.inputs import load
    from orchestrator.fleet.runs import as_diff
    from orchestrator.fleet.skeleton import new_options
    from orchestrator.report import run as run_report
    from orchestrator.report import screen

    inputs = load(playbook, inventory_path, list(limit), list(assignments), True)
    options = new_options(dry_run=True, diff=True, recheck=recheck, inventory=str(inventory_path))
    document, code = as_diff(*_run_deploy(inputs, options, accept_new_host_keys, as_json))
    if as_json:
        screen.print_json(document)
    else:
        run_report.print_run(document, stderr=True)
    sys.exit(code)


def _server_action(
    action: Action,
    playbook: str,
    inventory_path: Path,
    limit: tuple[str, ...],
    assignments: tuple[str, ...],
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """One of stop, start, restart, remove on every selected container, as a run."""
    from orchestrator.connections import ssh
    from orchestrator.fleet import runs
    from orchestrator.fleet.inputs import load
    from orchestrator.fleet.skeleton import new_options
    from orchestrator.report import run as run_report
    from orchestrator.report import screen

    inputs = load(playbook, inventory_path, list(limit), list(assignments))
    options = new_options()
    with _stoppable(inputs, as_json) as (view, cancel):
        document, code = runs.server_action(
            inputs, options, action, ssh(accept_new_host_keys), view, cancel
        )
    screen.print_json(document) if as_json else run_report.print_run(document)
    sys.exit(code)


@click.command()
@server_action_options
def stop(**options: Any) -> None:
    """Stop the deployment's server by its recorded PID, under the deploy lock; `status`
    then says `stopped` (exit 0). The release stays, for `orch start`."""
    _server_action("stop", **options)


@click.command()
@server_action_options
def start(**options: Any) -> None:
    """Start the current release's server again, wait until ready and gate it as a deploy
    does (a failed gate rolls nothing back: the release does not change)."""
    _server_action("start", **options)


@click.command()
@server_action_options
def restart(**options: Any) -> None:
    """Stop and start the current release's server, wait until ready and gate it, in the
    rollout's order (canaries first): a rolling restart."""
    _server_action("restart", **options)


@click.command()
@server_action_options
@click.option("--yes", is_flag=True, help="Yes, stop the server and delete every release.")
def remove(yes: bool, **options: Any) -> None:
    """Stop the deployment's server and delete its state dir on each container, releases
    included (its audit log stays, ending with the removal). Refused without --yes."""
    if not yes:
        raise click.UsageError(
            "remove stops the server and deletes every release of the deployment; "
            "add --yes to do it"
        )
    _server_action("remove", **options)


@click.command()
@click.argument("playbook", shell_complete=complete.playbooks)
@inventory_option
@click.option(
    "-l",
    "--limit",
    "container",
    required=True,
    metavar="CONTAINER",
    shell_complete=complete.limit_patterns,
    help="The one container to tune on.",
)
@set_option
@click.option(
    "--num-speculative-tokens",
    "values",
    required=True,
    metavar="A..B|A,B,...",
    help="The drafting depths to try, each a gated deploy: a range (both ends) or a list.",
)
@click.option(
    "--restore",
    is_flag=True,
    help="End on the release serving before the tune, not on the best depth.",
)
@recheck_option
@accept_keys_option
@json_option
def tune(
    playbook: str,
    inventory_path: Path,
    container: str,
    assignments: tuple[str, ...],
    values: str,
    restore: bool,
    recheck: bool,
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """Deploy the playbook once per `num_speculative_tokens` value on one container, each
    gated and recorded as a deploy; print acceptance, tokens/s and speedup per value and
    speed level, the best value per level and the line that applies it. Ends on the best
    passing release (or with --restore the one it started from); a signal stops it on a
    gated release. The playbook's hooks do not run."""
    from orchestrator.connections import ssh
    from orchestrator.fleet import tune as tuning
    from orchestrator.report import screen
    from orchestrator.report.tune import print_tune
    from orchestrator.tuning import parse_values

    ask = tuning.TuneAsk(
        playbook,
        inventory_path,
        container,
        list(assignments),
        parse_values(values),
        restore,
        recheck,
    )
    inputs = tuning.check(ask)
    with _stoppable(inputs, as_json) as (view, cancel):
        document, code = tuning.tune(ask, ssh(accept_new_host_keys), view, cancel)
    screen.print_json(document) if as_json else print_tune(document)
    sys.exit(code)
