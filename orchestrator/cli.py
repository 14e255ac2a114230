"""`orch`: thin commands that parse, call and print. Heavy imports are deferred
into each command so `orch --help` starts fast."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from orchestrator import completion as complete
from orchestrator.errors import InputError, NeedsAttention, OrchError
from orchestrator.lab.paths import DEFAULT_TOKENS_PER_SECOND

if TYPE_CHECKING:
    from orchestrator.contract import Action
    from orchestrator.documents.fleet import FleetDocument
    from orchestrator.documents.runs import DeployRun
    from orchestrator.documents.watch import Watch

EXIT_CODES = """Exit codes: 0 success; 1 the change did not pass its gate or checks (rolled back
or not applied, nothing broken); 2 bad input (nothing touched); 3 needs attention
(rollback failed, host unreachable, lock held, server down)."""


class OrchGroup(click.Group):
    """Turns project errors into their message and exit code, no traceback; with
    `--json` (or `-o json`) also into one document on stdout."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta.setdefault(RAW_ARGS, list(args))
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        """Everything printed passes `secrets.mask`, the error and its JSON document too."""
        from orchestrator.secrets import masked_output

        with masked_output():
            try:
                return super().invoke(ctx)
            except OrchError as exc:
                _fail(ctx, str(exc), exc.exit_code)
            except click.UsageError as exc:
                if not wants_json(ctx.meta.get(RAW_ARGS, [])):
                    raise
                _fail(ctx, exc.format_message(), exc.exit_code)


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


def _fail(ctx: click.Context, message: str, exit_code: int) -> NoReturn:
    from orchestrator.report.screen import error_document, print_json, printable

    click.echo(f"error: {printable(message)}", err=True)
    if wants_json(ctx.meta.get(RAW_ARGS, [])):
        print_json(error_document(message, exit_code))
    sys.exit(exit_code)


@click.group(
    cls=OrchGroup, epilog=EXIT_CODES, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(package_name="orch")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Deploy and verify vLLM speculative-decoding servers on Proxmox GPU containers."""
    from orchestrator.settings import default_inventory

    inventory = default_inventory()
    if inventory is not None:
        ctx.default_map = {name: {"inventory_path": inventory} for name in cli.commands}


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
    help="Only these containers: names, groups, globs, comma lists, !exclusions.",
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


@cli.command()
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
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """Render, push, verify, restart, gate; roll back by itself when the gate fails.
    The playbook's hooks run before and after (not with --dry-run)."""
    from orchestrator import cli_commands
    from orchestrator.hooks import Hooks
    from orchestrator.report import run as run_report
    from orchestrator.report import screen

    inputs = cli_commands.load(playbook, inventory_path, list(limit), list(assignments), True)
    if replace is not None:
        cli_commands.check_replace(inputs, replace)
    options = cli_commands.new_options(
        force=force, dry_run=dry_run, diff=diff, replace=replace, inventory=str(inventory_path)
    )
    hooks = None if dry_run else Hooks.for_run("deploy", inputs, options, _say)
    if hooks:
        hooks.before_deploy()
    document, code = _run_deploy(inputs, options, accept_new_host_keys, as_json)
    if hooks:
        hooks.after_run(document, code)
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
    from orchestrator import cli_commands
    from orchestrator.connections import ssh
    from orchestrator.report import live

    with _stoppable(inputs, as_json) as (view, cancel):
        return cli_commands.deploy(
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


@cli.command()
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
    from orchestrator import cli_commands
    from orchestrator.connections import ssh
    from orchestrator.hooks import Hooks
    from orchestrator.report import run as run_report
    from orchestrator.report import screen

    inputs = cli_commands.load(playbook, inventory_path, list(limit), list(assignments))
    options = cli_commands.new_options(force=force)
    with _stoppable(inputs, as_json) as (view, cancel):
        document, code = cli_commands.rollback(
            inputs, options, to_release, ssh(accept_new_host_keys), view, cancel
        )
    Hooks.for_run("rollback", inputs, options, _say).after_run(document, code)
    screen.print_json(document) if as_json else run_report.print_run(document)
    sys.exit(code)


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
    server actions' and `orch diff`'s."""
    return fleet_read_options(set_option(command))


@cli.command("diff")
@server_action_options
def diff_command(
    playbook: str,
    inventory_path: Path,
    limit: tuple[str, ...],
    assignments: tuple[str, ...],
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """What a deploy would change, as `kubectl diff` says it: stdout is one unified patch
    of every container's files (current against new) and nothing else, the summary goes
    to stderr; exit 0 when nothing would change, 1 when something would, 2 or more on an
    error (a preflight error included). Connects, takes no lock, changes nothing."""
    from orchestrator import cli_commands
    from orchestrator.report import run as run_report
    from orchestrator.report import screen

    inputs = cli_commands.load(playbook, inventory_path, list(limit), list(assignments), True)
    options = cli_commands.new_options(dry_run=True, diff=True, inventory=str(inventory_path))
    document, code = _run_deploy(inputs, options, accept_new_host_keys, as_json)
    if as_json:
        screen.print_json(document)
    else:
        run_report.print_run(document, stderr=True)
    sys.exit(cli_commands.diff_exit_code(document, code))


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
    from orchestrator import cli_commands
    from orchestrator.connections import ssh
    from orchestrator.report import run as run_report
    from orchestrator.report import screen

    inputs = cli_commands.load(playbook, inventory_path, list(limit), list(assignments))
    options = cli_commands.new_options()
    with _stoppable(inputs, as_json) as (view, cancel):
        document, code = cli_commands.server_action(
            inputs, options, action, ssh(accept_new_host_keys), view, cancel
        )
    screen.print_json(document) if as_json else run_report.print_run(document)
    sys.exit(code)


@cli.command()
@server_action_options
def stop(**options: Any) -> None:
    """Stop the deployment's server by its recorded PID, under the deploy lock; `status`
    then says `stopped` (exit 0). The release stays, for `orch start`."""
    _server_action("stop", **options)


@cli.command()
@server_action_options
def start(**options: Any) -> None:
    """Start the current release's server again, wait until ready and gate it as a deploy
    does (a failed gate rolls nothing back: the release does not change)."""
    _server_action("start", **options)


@cli.command()
@server_action_options
def restart(**options: Any) -> None:
    """Stop and start the current release's server, wait until ready and gate it, in the
    rollout's order (canaries first): a rolling restart."""
    _server_action("restart", **options)


@cli.command()
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


@cli.command()
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
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """Check drafter configs: on the containers (PLAYBOOK -i INVENTORY), or in local
    files (--drafter PATH --target PATH), optionally against a vLLM version."""
    from orchestrator.connections import ssh
    from orchestrator.errors import InputError
    from orchestrator.report import screen, tables

    if playbook:
        from orchestrator import cli_commands

        if not inventory_path:
            raise InputError("verify-config PLAYBOOK needs -i INVENTORY")
        inputs = cli_commands.load(playbook, inventory_path, list(limit), list(assignments), True)
        document, code = cli_commands.verify_remote(inputs, ssh(accept_new_host_keys))
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
    from orchestrator.verify import server_launch, verify_local

    if (server_env or attention_backend) and not server_version:
        raise InputError("--server-env and --attention-backend need --server-version")
    launch = server_launch(server_env, attention_backend) if server_version else None
    findings, judged = verify_local(
        drafter, target, tokenizer, profile, num_speculative_tokens, server_version, launch
    )
    tables.print_findings(findings, as_json=as_json, judged=judged)
    sys.exit(1 if screen.has_errors(findings) else 0)


ReadDocument = TypeVar("ReadDocument", bound="FleetDocument")


def _fleet_read(
    operation: Callable[[Any, Any], tuple[ReadDocument, int]],
    printer: Callable[[ReadDocument, Any], None],
    playbook: str,
    inventory_path: Path,
    limit: tuple[str, ...],
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """One look at every selected container, printed as a table (given the command's
    inputs, for hints with the real paths) or one document."""
    from orchestrator import cli_commands
    from orchestrator.connections import ssh
    from orchestrator.report import screen

    inputs = cli_commands.load(playbook, inventory_path, list(limit), [])
    document, code = operation(inputs, ssh(accept_new_host_keys))
    screen.print_json(document) if as_json else printer(document, inputs)
    sys.exit(code)


@cli.command()
@fleet_read_options
def status(**options: Any) -> None:
    """Per container: current release, server PID and health, last gate, lock holder."""
    from orchestrator import cli_commands
    from orchestrator.report import tables

    _fleet_read(
        cli_commands.status,
        lambda doc, inputs: tables.print_status(doc, inputs.deploy_command()),
        **options,
    )


@cli.command()
@fleet_read_options
def releases(**options: Any) -> None:
    """Per run, newest first: the release it left each container on, and whether that
    release is current, kept or pruned, as the containers record it (their audit logs)."""
    from orchestrator import cli_commands
    from orchestrator.report import tables

    _fleet_read(cli_commands.releases, lambda doc, _: tables.print_releases(doc), **options)


@cli.command()
@fleet_read_options
def unlock(**options: Any) -> None:
    """Remove a stale deploy lock, showing whose it was."""
    from orchestrator import cli_commands
    from orchestrator.report import tables

    _fleet_read(cli_commands.unlock, lambda doc, _: tables.print_unlock(doc), **options)


@cli.command()
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
    from orchestrator import cli_commands
    from orchestrator import logs as server_logs
    from orchestrator.connections import ssh
    from orchestrator.contract import run_result
    from orchestrator.documents.fleet import Logs
    from orchestrator.report import screen

    if follow and as_json:
        raise click.UsageError("--json prints one document: it cannot --follow")
    inputs = cli_commands.load(playbook, inventory_path, list(limit), [])
    plans = {p.container: p for p in inputs.plans}
    named = len(plans) > 1

    def emit(name: str, line: str) -> None:
        click.echo(screen.printable(f"{name}: {line}" if named else line))

    def warn(name: str, reason: str) -> None:
        click.echo(screen.printable(f"{name}: {reason}"), err=True)

    with ssh(accept_new_host_keys)(inputs.inventory, None) as connections:
        if follow:
            with _stop_on_signals() as stop:
                server_logs.follow(connections, plans, lines, emit, warn, stop)
            sys.exit(0)
        tail = server_logs.tail(connections, plans, lines)
    if as_json:
        screen.print_json(
            Logs(
                playbook=inputs.playbook.name,
                result=run_result(tail.exit_code),
                targets=tail.targets,
            )
        )
    else:
        for target in tail.targets:
            reason = target.error or target.note
            if reason:
                warn(target.name, reason)
            for line in target.lines:
                emit(target.name, line)
    sys.exit(tail.exit_code)


@contextmanager
def _stop_on_signals() -> Iterator[Any]:
    """SIGINT and SIGTERM end a follow at its next round, as its normal end."""
    import signal
    import threading

    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@cli.command()
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
    import json

    from orchestrator import cli_commands
    from orchestrator import watch as live
    from orchestrator.connections import ssh
    from orchestrator.contract import jsonable
    from orchestrator.durations import seconds
    from orchestrator.report.screen import printable

    every, span = seconds(interval, "--interval"), seconds(window, "--window")
    inputs = cli_commands.load(playbook, inventory_path, list(limit), list(assignments))

    def emit(doc: Watch) -> None:
        if as_json:
            click.echo(json.dumps(jsonable(doc)))
            return
        if not once:
            click.echo(f"-- {doc.time[11:19]} (window {doc.window_seconds:g} s)")
        for line in live.lines(doc):
            click.echo(printable(line))

    with (
        ssh(accept_new_host_keys)(inputs.inventory, None) as connections,
        _stop_on_signals() as stop,
    ):
        watcher = live.Watcher(
            inputs.playbook.name,
            inputs.plans,
            connections.container,
            inputs.playbook.gate,
            span,
        )
        code = live.watch(watcher, every, once, emit, stop.wait)
    sys.exit(code if once else 0)


@cli.command()
@click.option("-n", "count", default=20, show_default=True, help="How many runs.")
@click.option(
    "--show",
    "show_run",
    metavar="RUN_ID",
    shell_complete=complete.run_ids,
    help="Print that run's log (a unique prefix of the id will do).",
)
@click.option(
    "--steps",
    "steps_only",
    is_flag=True,
    help="With --show: only the run's steps and results, not every remote command.",
)
@click.option("--playbook", "playbook_name", metavar="NAME", help="Only runs of this playbook.")
@click.option(
    "--since",
    metavar="SPAN|DATE",
    help="Only runs started since then: a span ago (2h, 7d) or a date (2026-12-01).",
)
@click.option(
    "--inventory",
    "inventory_file",
    type=click.Path(path_type=Path),
    help="Only runs on this inventory file (the cluster it describes).",
)
@json_option
def history(
    count: int,
    show_run: str | None,
    steps_only: bool,
    playbook_name: str | None,
    since: str | None,
    inventory_file: Path | None,
    as_json: bool,
) -> None:
    """Runs from the local history: when, who, what, and each target's outcome."""
    from orchestrator.documents.history import History as HistoryDocument
    from orchestrator.durations import since as moment
    from orchestrator.history import History
    from orchestrator.report import screen, tables

    if show_run is not None:
        from orchestrator import runlog

        log = runlog.read(show_run)
        lines = runlog.steps_only(log.lines) if steps_only else log.lines
        if as_json:
            from orchestrator.documents.fleet import RunLog

            screen.print_json(RunLog(run_id=log.run_id, path=str(log.path), lines=lines))
        else:
            for line in lines:
                click.echo(screen.printable(line))
        return
    if steps_only:
        raise InputError("--steps goes with --show RUN_ID")
    after = moment(since, "--since") if since else None
    runs = HistoryDocument.of(History().last(count, playbook_name, after, inventory_file))
    screen.print_json(runs) if as_json else tables.print_history(runs)


@cli.command()
@json_option
def profiles(as_json: bool) -> None:
    """List the built-in profiles of published drafters, with their kind."""
    from orchestrator.drafters.profiles import list_profiles
    from orchestrator.report import tables

    tables.print_profiles(list_profiles(), as_json=as_json)


@cli.command()
@click.argument("playbook", shell_complete=complete.playbooks)
@inventory_option
@limit_option
@set_option
@click.option(
    "-o",
    "--output",
    metavar="DIR",
    type=click.Path(path_type=Path, file_okay=False),
    help="Write DIR/<container>/config.json and serve.sh as a deploy would, instead.",
)
@file_json_option
def render(
    playbook: str,
    inventory_path: Path,
    limit: tuple[str, ...],
    assignments: tuple[str, ...],
    output: Path | None,
    as_json: bool,
) -> None:
    """Print each target's rendered drafter config and launch script (or write them
    with --output), with the drafter checks against the profile."""
    from orchestrator import release
    from orchestrator.inventory import load_inventory
    from orchestrator.plan import plan_deploy
    from orchestrator.playbook import find_playbook, load_playbook
    from orchestrator.report import screen, tables
    from orchestrator.secrets import resolve

    book = load_playbook(find_playbook(playbook), list(assignments))
    plans = plan_deploy(book, load_inventory(inventory_path), list(limit), resolve(book))
    written = (
        {p.container: [str(f) for f in release.write_local(p, output)] for p in plans}
        if output
        else None
    )
    if as_json:
        screen.print_json(tables.render_document(book.name, plans, written))
    else:
        tables.print_plans(plans, written)
    sys.exit(1 if any(screen.has_errors(p.findings) for p in plans) else 0)


@cli.command()
@click.argument("playbook", required=False, shell_complete=complete.playbooks)
@inventory_option
@limit_option
@set_option
@accept_keys_option
@json_option
def doctor(
    playbook: str | None,
    inventory_path: Path,
    limit: tuple[str, ...],
    assignments: tuple[str, ...],
    accept_new_host_keys: bool,
    as_json: bool,
) -> None:
    """Read-only: is everything a deploy needs there? Logins, containers, GPUs, and with
    PLAYBOOK the server command, model dirs and disk; one line per check, with the fix."""
    from orchestrator.connections import ssh
    from orchestrator.doctor import exit_code, run_doctor
    from orchestrator.report import tables

    if playbook:
        from orchestrator.inventory import load_inventory
        from orchestrator.plan import plan_each
        from orchestrator.playbook import find_playbook, load_playbook

        book = load_playbook(find_playbook(playbook), list(assignments))
        inv = load_inventory(inventory_path)
        plans, errors = plan_each(book, inv, list(limit))
        names = [
            n for n in inv.select(book.targets) if n in {p.container for p in plans} | set(errors)
        ]
        checks = run_doctor(inv, names, ssh(accept_new_host_keys), book, plans, errors)
    else:
        from orchestrator.inventory import load_inventory

        inv = load_inventory(inventory_path)
        checks = run_doctor(inv, inv.select(limit), ssh(accept_new_host_keys))
    tables.print_checks(checks, as_json)
    sys.exit(exit_code(checks))


@cli.group()
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
    from orchestrator.discovery.run import discover, login_settings, write_new
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
    cluster = discover(address, login, accept_new_host_keys)
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
            for name, why in cluster.unread.items():
                click.echo(f"warning: node {name} not read: {why.detail}", err=True)
        sys.exit(NeedsAttention.exit_code)


@cli.command()
@click.argument("run_id", metavar="RUN_ID", shell_complete=complete.run_ids)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["markdown", "html"]),
    default="markdown",
    show_default=True,
    help="Markdown (a text chart) or one self-contained HTML page (an inline SVG chart).",
)
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write it to FILE.")
def report(run_id: str, output_format: str, output: Path | None) -> None:
    """One run to share, from the local history and run log: who, when, what changed,
    each container's steps and gate per phase (threshold, bound, acceptance curve), the
    rollback and the errors."""
    from orchestrator.report import runpage

    run, lines = runpage.load(run_id)
    parts = runpage.sections(run, lines)
    page = runpage.to_html(parts) if output_format == "html" else runpage.markdown(parts)
    if output is None:
        click.echo(page, nl=False)
        return
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{output}: cannot write the report: {exc.strerror}") from None
    click.echo(f"wrote {output}", err=True)


@cli.command()
@click.argument("playbook", shell_complete=complete.playbooks)
@set_option
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["prometheus"]),
    default="prometheus",
    show_default=True,
    help="The rules' format.",
)
@click.option(
    "--window", default="5m", show_default=True, help="The rates' sliding window (PromQL)."
)
@click.option(
    "--for",
    "hold",
    default="15m",
    show_default=True,
    help="How long a server stays below a threshold before the alert fires.",
)
@json_option
def alerts(
    playbook: str,
    assignments: tuple[str, ...],
    output_format: str,
    window: str,
    hold: str,
    as_json: bool,
) -> None:
    """Prometheus recording and alerting rules: the gate's acceptance thresholds,
    watched on live traffic from vLLM's counters."""
    import shlex

    from orchestrator import alerts as rules
    from orchestrator.playbook import find_playbook, load_playbook

    book = load_playbook(find_playbook(playbook), list(assignments))
    groups = rules.rule_groups(book, window, hold)
    if as_json:
        from orchestrator.documents.local import Alerts
        from orchestrator.report.screen import print_json

        print_json(Alerts(playbook=book.name, format=output_format, groups=groups["groups"]))
        return
    sets = [arg for a in assignments for arg in ("--set", a)]
    command = shlex.join(["orch", "alerts", playbook, *sets, "--window", window, "--for", hold])
    click.echo(rules.rules_text(book, groups, command), nl=False)


@cli.command()
@click.argument("path", required=False)
@click.option(
    "--markdown",
    is_flag=True,
    help="Print the reference page of PATH (`playbook` or `inventory`), as in docs/.",
)
@json_option
def explain(path: str | None, markdown: bool, as_json: bool) -> None:
    """Every playbook and inventory field: its type, default and meaning
    (e.g. `orch explain gate.min_drafts`, `orch explain inventory.hosts`)."""
    from orchestrator import explain as fields

    if markdown:
        if path not in fields.ROOTS or as_json:
            raise click.UsageError("--markdown takes `playbook` or `inventory`, without --json")
        click.echo(fields.markdown(path), nl=False)
    elif as_json:
        from orchestrator.documents.local import Explain
        from orchestrator.report.screen import print_json

        field, inside = fields.described(path)
        print_json(Explain(path=path, field=field, fields=inside))
    else:
        click.echo(fields.text(path), nl=False)


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

        print_json(
            InventoryImport(
                source=str(source),
                output=str(output) if output else None,
                inventory=None if output else imported.text,
                hosts=imported.hosts,
                groups=imported.groups,
                not_mapped=imported.notes,
                targets=imported.containers,
            )
        )
    elif output is None:
        click.echo(imported.text, nl=False)
    else:
        click.echo(
            f"wrote {output}: {len(imported.hosts)} host(s), "
            f"{len(imported.containers)} container(s), {len(imported.notes)} note(s)"
        )


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@json_option
def completion(shell: str, as_json: bool) -> None:
    """Print the shell completion script, e.g. `eval "$(orch completion bash)"`."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None  # every choice is one click ships
    source = completer(cli, {}, "orch", "_ORCH_COMPLETE").source()
    if as_json:
        from orchestrator.documents.local import Completion
        from orchestrator.report.screen import print_json

        print_json(Completion(shell=shell, script=source))
    else:
        click.echo(source)


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
    started = the_lab.up(spec)
    running = the_lab.server()
    if as_json:
        from orchestrator.documents.lab import LabUp
        from orchestrator.report.screen import print_json

        print_json(
            LabUp(
                started=started,
                dir=str(the_lab.root),
                inventory=str(the_lab.inventory),
                server=running["kind"],
                vllm_version=running["vllm_version"],
            )
        )
        return
    click.echo(
        f"lab {'started' if started else 'already running'} in {the_lab.root} "
        f"({_server_words(running)})"
    )
    playbook = "lab-draft-model" if running["kind"] == "vllm" else "qwen-dflash"
    click.echo(f"next: orch deploy {playbook} -i {the_lab.inventory}")


def _server_words(server: dict[str, str]) -> str:
    kind = "the real vLLM" if server["kind"] == "vllm" else "vLLM stand-in"
    return f"{kind} {server['vllm_version']}"


@lab.command("down")
@lab_dir_option
@json_option
def lab_down(lab_dir: Path | None, as_json: bool) -> None:
    """Stop every process the lab started, by PID."""
    from orchestrator.lab.cluster import Lab, default_lab_dir

    the_lab = Lab(lab_dir or default_lab_dir())
    stopped = the_lab.down()
    if as_json:
        from orchestrator.documents.lab import LabDown
        from orchestrator.report.screen import print_json

        print_json(LabDown(dir=str(the_lab.root), stopped=stopped))
        return
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
    from orchestrator.documents.lab import LabStatus
    from orchestrator.lab.cluster import Lab, default_lab_dir
    from orchestrator.report import screen, tables

    the_lab = Lab(lab_dir or default_lab_dir())
    server = the_lab.server()
    doc = LabStatus(
        dir=str(the_lab.root),
        server=server["kind"],
        vllm_version=server["vllm_version"],
        targets=the_lab.status(),
    )
    screen.print_json(doc) if as_json else tables.print_lab_status(doc)


def main() -> None:
    cli(prog_name="orch")
