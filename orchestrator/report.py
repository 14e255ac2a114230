"""What `orch` prints: rich tables for people, one JSON document for programs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from orchestrator.drafters.findings import Finding, Severity

if TYPE_CHECKING:
    from orchestrator.drafters.profiles import Profile
    from orchestrator.plan import TargetPlan


def console() -> Console:
    """Rich honours NO_COLOR and falls back to plain text off a terminal."""
    return Console(soft_wrap=False)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == Severity.ERROR for f in findings)


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: f.severity != Severity.ERROR)


def findings_table(findings: Iterable[Finding], title: str | None = None) -> Table:
    table = Table(title=title, show_lines=False)
    for column in ("severity", "field", "expected", "actual", "hint"):
        table.add_column(column, overflow="fold")
    for f in sorted_findings(findings):
        style = "red" if f.severity == Severity.ERROR else "yellow"
        table.add_row(
            f"[{style}]{f.severity}[/]", f.field, _show(f.expected), _show(f.actual), f.message
        )
    return table


def print_findings(findings: list[Finding], as_json: bool = False) -> None:
    if as_json:
        document = {
            "ok": not has_errors(findings),
            "findings": [f.to_dict() for f in sorted_findings(findings)],
        }
        print(json.dumps(document, indent=2))
        return
    out = console()
    if findings:
        out.print(findings_table(findings))
    errors = sum(f.severity == Severity.ERROR for f in findings)
    out.print(f"{errors} error(s), {len(findings) - errors} warning(s)")


def print_profiles(profiles: Iterable[Profile]) -> None:
    table = Table()
    for column in ("profile", "target", "target layers", "target_layer_ids", "mask_token_id"):
        table.add_column(column)
    for p in profiles:
        config = p.config
        dflash = config.get("dflash_config", {})
        table.add_row(
            p.name,
            p.target_name,
            str(config.get("num_target_layers")),
            _show(dflash.get("target_layer_ids")),
            _show(dflash.get("mask_token_id")),
        )
    console().print(table)


def print_plans(plans: Iterable[TargetPlan]) -> None:
    out = console()
    for plan in plans:
        out.rule(f"{plan.container} on {plan.host}: release {plan.release_id}")
        for name, data in plan.files.items():
            lexer = "json" if name.endswith(".json") else "bash"
            out.print(f"[bold]{plan.release_dir}/{name}[/]")
            out.print(Syntax(data.decode(), lexer, theme="ansi_dark", word_wrap=True))
        if plan.findings:
            out.print(findings_table(plan.findings, title="drafter checks against the profile"))
        else:
            out.print("drafter checks: no findings")


def print_rows(rows: list[dict[str, Any]], as_json: bool = False) -> None:
    """A list of flat records as a table (or JSON)."""
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table()
    for column in rows[0] if rows else ():
        table.add_column(column)
    for row in rows:
        table.add_row(*(_show(value) for value in row.values()))
    console().print(table)


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
