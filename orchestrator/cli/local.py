"""The commands that work on this machine only: history, profiles, render,
explain, alerts, completion and report."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from orchestrator import completion as complete
from orchestrator.cli.options import (
    file_json_option,
    inventory_option,
    json_option,
    limit_option,
    set_option,
)
from orchestrator.errors import InputError


@click.command()
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
@click.option("--container", metavar="NAME", help="Only runs with this container among theirs.")
@json_option
def history(
    count: int,
    show_run: str | None,
    steps_only: bool,
    playbook_name: str | None,
    since: str | None,
    inventory_file: Path | None,
    container: str | None,
    as_json: bool,
) -> None:
    """Runs from the local history: when, who, what, and each target's outcome."""
    from orchestrator.documents.fleet import RunLog
    from orchestrator.documents.history import History as HistoryDocument
    from orchestrator.durations import since as moment
    from orchestrator.history import History
    from orchestrator.report import screen, tables

    if show_run is not None:
        log = RunLog.of(show_run, steps_only)
        if as_json:
            screen.print_json(log)
        else:
            for line in log.lines:
                click.echo(screen.printable(line))
        return
    if steps_only:
        raise InputError("--steps goes with --show RUN_ID")
    after = moment(since, "--since") if since else None
    runs = HistoryDocument.of(
        History().last(count, playbook_name, after, inventory_file, container)
    )
    if as_json:
        screen.print_json(runs)
        return
    given = {
        "--playbook": playbook_name,
        "--since": since,
        "--inventory": inventory_file,
        "--container": container,
    }
    tables.print_history(runs, [shlex.join([name, str(v)]) for name, v in given.items() if v])


@click.command()
@json_option
def profiles(as_json: bool) -> None:
    """List the built-in profiles of published drafters, with their kind."""
    from orchestrator.documents.local import Profiles
    from orchestrator.drafters.profiles import list_profiles
    from orchestrator.report import screen, tables

    document = Profiles.of(list_profiles())
    screen.print_json(document) if as_json else tables.print_profiles(document)


@click.command()
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
    from orchestrator.documents.local import Render
    from orchestrator.drafters.findings import has_errors
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
        screen.print_json(Render.of(book.name, plans, written))
    else:
        tables.print_plans(plans, written)
    sys.exit(1 if any(has_errors(p.findings) for p in plans) else 0)


@click.command()
@click.argument("run_id", metavar="RUN_ID", shell_complete=complete.run_ids)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["markdown", "html"]),
    default="markdown",
    show_default=True,
    help="Markdown (a text chart) or one self-contained HTML page (an inline SVG chart).",
)
@click.option(
    "-o",
    "--output",
    metavar="FILE",
    help="Write it to FILE (`-o json`: print the run's document, as --json does).",
)
@file_json_option
def report(run_id: str, output_format: str, output: str | None, as_json: bool) -> None:
    """One run to share, from the local history and run log: who, when, what changed,
    each container's steps and gate per phase (threshold, bound, acceptance curve), the
    rollback and the errors."""
    from click.core import ParameterSource

    from orchestrator.documents.report import Report
    from orchestrator.history import History
    from orchestrator.report import page as pages
    from orchestrator.report import runpage, screen

    if output == "json":  # kubectl's spelling, as the other commands take it
        as_json, output = True, None
    ctx = click.get_current_context()
    if as_json and ctx.get_parameter_source("output_format") == ParameterSource.COMMANDLINE:
        raise click.UsageError("--json prints the run's document: it takes no --format")
    document = Report.of(History().find(run_id))
    if as_json:
        page = screen.json_text(document) + "\n"
    else:
        parts = runpage.sections(document)
        page = pages.to_html(parts) if output_format == "html" else pages.markdown(parts)
    if output is None:
        click.echo(page, nl=False)
        return
    try:
        Path(output).write_text(page, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{output}: cannot write the report: {exc.strerror}") from None
    click.echo(f"wrote {output}", err=True)


@click.command()
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

        print_json(Alerts.of(book.name, output_format, groups))
        return
    sets = [arg for a in assignments for arg in ("--set", a)]
    command = shlex.join(["orch", "alerts", playbook, *sets, "--window", window, "--for", hold])
    click.echo(rules.rules_text(book, groups, command), nl=False)


@click.command()
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

        print_json(Explain.of(path))
    else:
        click.echo(fields.text(path), nl=False)


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@json_option
def completion(shell: str, as_json: bool) -> None:
    """Print the shell completion script, e.g. `eval "$(orch completion bash)"`."""
    root = click.get_current_context().find_root().command
    if as_json:
        from orchestrator.report.screen import print_json

        print_json(complete.document(root, shell))
    else:
        click.echo(complete.script(root, shell))
