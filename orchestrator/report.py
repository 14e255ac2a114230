"""What `orch` prints: rich tables for people, one JSON document for programs."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.syntax import Syntax
from rich.table import Table

from orchestrator.drafters.findings import Finding, Severity
from orchestrator.drafters.kinds import get_kind

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


def profile_rows(profiles: Iterable[Profile]) -> list[dict[str, Any]]:
    """Each profile's name, kind and target, then the fields its kind tells profiles apart by."""
    return [
        {
            "profile": p.name,
            "kind": p.kind,
            "target": p.target_name,
            **get_kind(p.kind).describe(p),
            **({"notes": list(p.notes)} if p.notes else {}),
        }
        for p in profiles
    ]


def print_profiles(profiles: Iterable[Profile], as_json: bool = False) -> None:
    rows = profile_rows(profiles)
    if as_json:
        print_json(rows)
        return
    table = Table()
    for column in ("profile", "kind", "target", "details"):
        table.add_column(column)
    notes = []
    for row in rows:
        fields = {key: value for key, value in list(row.items())[3:] if key != "notes"}
        details = "; ".join(f"{key} {_show(value)}" for key, value in fields.items())
        table.add_row(row["profile"], row["kind"], row["target"], details)
        notes += [f"{row['profile']}: {note}" for note in row.get("notes", [])]
    out = console()
    out.print(table)
    for note in notes:
        out.print(f"note: {note}", highlight=False)


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
    columns = list(dict.fromkeys(key for row in rows for key in row))  # first-seen order
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(_show(row[c]) if c in row else "" for c in columns))
    console().print(table)


def _mean_length(target: dict[str, Any]) -> str:
    mean = (target.get("gate") or {}).get("mean_acceptance_length")
    return "" if mean is None else f"{mean:.2f}"


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class StepView:
    """Per-container current step: a live table on a terminal, plain lines elsewhere."""

    def __init__(self, names: list[str], enabled: bool = True) -> None:
        self.out = console()
        self.enabled = enabled
        self.live_mode = enabled and self.out.is_terminal and not os.environ.get("NO_COLOR")
        self.steps: dict[str, tuple[str, float]] = {n: ("waiting", time.monotonic()) for n in names}
        self.started = time.monotonic()
        self.live: Live | None = None
        self.lock = threading.Lock()

    def _table(self) -> Table:
        table = Table(box=None)
        table.add_column("container")
        table.add_column("step")
        table.add_column("for", justify="right")
        for name, (step, since) in self.steps.items():
            table.add_row(name, step, f"{time.monotonic() - since:5.1f}s")
        return table

    def __call__(self, name: str, step: str) -> None:
        with self.lock:
            kind = step.split(" (")[0]  # "wait ready (12 s left)": one plain line per kind
            repeated = self.steps.get(name, ("", 0.0))[0].split(" (")[0] == kind
            self.steps[name] = (step, time.monotonic())
            if self.live:
                self.live.update(self._table())
            elif self.enabled and not repeated:
                self.out.print(
                    f"{time.monotonic() - self.started:6.1f}s {name}: {step}", highlight=False
                )

    def __enter__(self) -> StepView:
        if self.live_mode:
            self.live = Live(
                self._table(),
                console=self.out,
                refresh_per_second=4,
                get_renderable=self._table,
                transient=True,
            )
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.__exit__(None, None, None)


def print_run(document: dict[str, Any]) -> None:
    """The final table of a deploy or rollback, with per-position acceptance bars."""
    out = console()
    table = Table(title=f"{document['playbook']} run {document['run_id']}: {document['result']}")
    for column in ("container", "result", "release", "previous", "gate", "mean length", "drafts"):
        table.add_column(column)
    for target in document["targets"]:
        gate = target.get("gate") or {}
        table.add_row(
            target["name"],
            target["result"],
            target.get("release") or "",
            target.get("previous_release") or "",
            gate.get("verdict") or "",
            _mean_length(target),
            str(gate.get("drafts") or ""),
        )
    out.print(table)
    for target in document["targets"]:
        for label, key in (("gate", "gate"), ("rollback gate", "rollback_gate")):
            gate = target.get(key)
            if gate:
                out.print(f"[bold]{target['name']}[/] {label}: {gate['reason']}", highlight=False)
                if gate.get("explanation"):
                    out.print(f"  why: {gate['explanation']}", highlight=False)
                out.print(acceptance_bars(gate.get("per_position_acceptance") or []))
        if target.get("findings"):
            out.print(
                findings_table(
                    [Finding(**f) for f in target["findings"]], title=f"{target['name']}: findings"
                )
            )
        if target.get("error"):
            out.print(f"[red]{target['name']}: {target['error']}[/]", highlight=False)
        if target.get("diff"):
            out.print(Syntax(target["diff"], "diff", theme="ansi_dark"))
    for warning in document.get("warnings", []):
        out.print(f"[yellow]warning: {warning}[/]", highlight=False)


def acceptance_bars(rates: list[float], width: int = 40) -> str:
    """`pos  1 ████████░░ 0.80` per position: where the drafts stop being accepted."""
    return "\n".join(
        f"  pos {i:2d} {'█' * round(rate * width)}{'░' * (width - round(rate * width))} {rate:.3f}"
        for i, rate in enumerate(rates, 1)
    )


def print_json(document: Any) -> None:
    print(json.dumps(document, indent=2, default=str))


def print_verify(document: dict[str, Any]) -> None:
    out = console()
    for target in document["targets"]:
        out.rule(f"{target['name']} on {target['host']}: release {target.get('release')}")
        if target.get("error"):
            out.print(f"[red]{target['error']}[/]", highlight=False)
        for drift in target.get("drift", []):
            out.print(f"[red]drift:[/] {drift}", highlight=False)
        if target.get("findings"):
            out.print(findings_table([Finding(**f) for f in target["findings"]]))
    out.print("ok" if document["ok"] else "[red]problems found[/]")


def _position1(target: dict[str, Any]) -> str:
    """Position-1 acceptance of the target's gate, comparable across methods."""
    positions = (target.get("gate") or {}).get("per_position_acceptance") or []
    return f"{positions[0]:.2f}" if positions else "-"


def print_history(runs: list[dict[str, Any]]) -> None:
    table = Table()
    for column in (
        "started",
        "user",
        "command",
        "playbook",
        "model",
        "method",
        "drafter",
        "run",
        "target",
        "result",
        "mean length",
        "pos-1",
        "release",
        "previous",
    ):
        table.add_column(column)
    for run in runs:
        for target in run["targets"]:
            table.add_row(
                run["started"],
                run["user"],
                run["command"],
                run["playbook"],
                run.get("model") or "",
                run.get("method") or "",
                run.get("drafter") or "",
                run["run_id"],
                target["name"],
                target["result"],
                _mean_length(target),
                _position1(target),
                target.get("release") or "",
                target.get("previous_release") or "",
            )
    console().print(table)


def print_checks(checks: list[dict[str, str]], as_json: bool = False) -> None:
    """`orch doctor`: one line per check (`fix:` under each failure), or one JSON document."""
    if as_json:
        print_json({"ok": all(c["status"] != "fail" for c in checks), "checks": checks})
        return
    target_width = max((len(c["target"]) for c in checks), default=0)
    check_width = max((len(c["check"]) for c in checks), default=0)
    for c in checks:  # plain lines: one per check, never wrapped, for grep and logs
        status = c["status"].upper() if c["status"] == "fail" else c["status"]
        print(
            f"{c['target']:<{target_width}}  {c['check']:<{check_width}}  {status:<4}  "
            + c["detail"]
        )
        if c["status"] == "fail" and c["fix"]:
            print(" " * (target_width + check_width + 10) + f"fix: {c['fix']}")
    failed = sum(c["status"] == "fail" for c in checks)
    print(f"{failed} check(s) failed" if failed else "ready to deploy")
