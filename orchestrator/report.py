"""What `orch` prints: rich tables for people, one JSON document for programs.

Much of what is printed comes from elsewhere: lock owners, server logs, remote
errors, inventory names. Rich markup is therefore off, styles are given as
`Text` styles, and every piece of such text goes through `text()`, which
shows control characters (a terminal escape in a lock owner) as escapes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from orchestrator.drafters.findings import Finding, Severity
from orchestrator.drafters.kinds import get_kind

if TYPE_CHECKING:
    from orchestrator.drafters.profiles import Profile
    from orchestrator.plan import TargetPlan


# C0 and C1 control characters but newline and tab, shown as Python escapes.
_CONTROLS = {
    code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)] if chr(code) not in "\n\t"
}


def console() -> Console:
    """Rich honours NO_COLOR and falls back to plain text off a terminal; no markup."""
    return Console(soft_wrap=False, markup=False)


def printable(value: str) -> str:
    """`value` with its control characters shown as escapes, safe for a terminal."""
    return value.translate(_CONTROLS)


def text(value: Any, style: str = "") -> Text:
    """Text from anywhere, printed as it is: never markup, never a terminal escape."""
    return Text(printable(value if isinstance(value, str) else json.dumps(value)), style=style)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == Severity.ERROR for f in findings)


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: f.severity != Severity.ERROR)


def findings_table(findings: Iterable[Finding], title: str | Text | None = None) -> Table:
    table = Table(title=title, show_lines=False)
    for column in ("severity", "field", "expected", "actual", "hint"):
        table.add_column(column, overflow="fold")
    for f in sorted_findings(findings):
        style = "red" if f.severity == Severity.ERROR else "yellow"
        table.add_row(
            text(str(f.severity), style),
            text(f.field),
            text(f.expected),
            text(f.actual),
            text(f.message),
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
        details = "; ".join(
            f"{key} {value if isinstance(value, str) else json.dumps(value)}"
            for key, value in fields.items()
        )
        table.add_row(text(row["profile"]), text(row["kind"]), text(row["target"]), text(details))
        notes += [f"{row['profile']}: {note}" for note in row.get("notes", [])]
    out = console()
    out.print(table)
    for note in notes:
        out.print(text(f"note: {note}"))


def print_plans(plans: Iterable[TargetPlan], written: dict[str, list[str]] | None = None) -> None:
    """Each container's files as plain text under `==> container:path <==` headers (whole
    lines, never wrapped), or with `written` the local files they went to; then the checks."""
    out = console()
    for plan in plans:
        write_plain(f"# {plan.container} on {plan.host}: release {plan.release_id}")
        if written is not None:
            for path in written[plan.container]:
                write_plain(f"wrote {path}")
        else:
            for name, data in plan.files.items():
                write_plain(f"==> {plan.container}:{plan.release_dir}/{name} <==\n")
                write_plain(data.decode("utf-8", "replace"))
        if plan.findings:
            out.print(findings_table(plan.findings, title="drafter checks against the profile"))
        else:
            out.print("drafter checks: no findings")


def write_plain(value: str, stream: TextIO | None = None) -> None:
    """`value` as it is, whole lines never wrapped, ending with a newline; control
    characters shown as escapes."""
    out = stream or sys.stdout
    out.write(printable(value) + ("" if value.endswith("\n") else "\n"))
    out.flush()


class DiffPrinter:
    """Each container's `diff -u` on stdout as soon as it is known, a whole block at a time
    (parallel containers never interleave), lines never wrapped or cut: plain text, or on
    a terminal above the live step view (the terminal folds long lines, nothing else)."""

    def __init__(self, view: StepView) -> None:
        self.view = view  # disabled with --json: the document has the diffs
        # A live view redirects sys.stdout through itself; diffs go to the real one.
        self.stdout: TextIO = getattr(sys.stdout, "rich_proxied_file", sys.stdout)
        self.lock = threading.Lock()

    def __call__(self, container: str, diff: str) -> None:
        if not (diff and self.view.enabled):
            return
        with self.lock:
            live = self.view.live
            if live is not None and self.stdout.isatty():
                live.console.print(text(diff.rstrip("\n")), soft_wrap=True, highlight=False)
            else:
                write_plain(diff, self.stdout)


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
        table.add_row(*(text(row[c]) if c in row else "" for c in columns))
    console().print(table)


def _mean_length(target: dict[str, Any]) -> str:
    mean = (target.get("gate") or {}).get("mean_acceptance_length")
    return "" if mean is None else f"{mean:.2f}"


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
            table.add_row(text(name), text(step), f"{time.monotonic() - since:5.1f}s")
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
                    text(f"{time.monotonic() - self.started:6.1f}s {name}: {step}"), highlight=False
                )

    def describe(self) -> str:
        """What each container is doing now, for a message while it finishes."""
        with self.lock:
            return "; ".join(f"{name}: {step}" for name, (step, _) in self.steps.items())

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
    table = Table(
        title=text(f"{document['playbook']} run {document['run_id']}: {document['result']}")
    )
    for column in ("container", "result", "release", "previous", "gate", "mean length", "drafts"):
        table.add_column(column)
    for target in document["targets"]:
        gate = target.get("gate") or {}
        table.add_row(
            text(target["name"]),
            text(target["result"]),
            text(target.get("release") or ""),
            text(target.get("previous_release") or ""),
            text(gate.get("verdict") or ""),
            _mean_length(target),
            str(gate.get("drafts") or ""),
        )
    out.print(table)
    if to := document.get("to"):
        state = f"the state run {to['run_id']} left" if to["run_id"] else f"release {to['release']}"
        out.print(text(f"--to {to['query']}: back to {state}"), highlight=False, soft_wrap=True)
    for target in document["targets"]:
        for label, key in (("gate", "gate"), ("rollback gate", "rollback_gate")):
            gate = target.get(key)
            if gate:
                out.print(
                    text(target["name"], "bold") + text(f" {label}: {gate['reason']}"),
                    highlight=False,
                )
                if gate.get("explanation"):
                    out.print(text(f"  why: {gate['explanation']}"), highlight=False)
                out.print(acceptance_bars(gate.get("per_position_acceptance") or []))
                if gate.get("by_context"):
                    out.print(context_table(gate["by_context"]))
                if gate.get("advice"):
                    out.print(f"  advice: {gate['advice']['text']}", highlight=False)
        if target.get("findings"):
            out.print(
                findings_table(
                    [Finding(**f) for f in target["findings"]],
                    title=text(f"{target['name']}: findings"),
                )
            )
        for note in target.get("notes") or []:
            out.print(f"{target['name']}: {note}", markup=False, highlight=False)
        if target.get("error"):
            out.print(text(f"{target['name']}: {target['error']}", "red"), highlight=False)
        if target.get("diff") == "":
            out.print(text(f"{target['name']}: no file differs from the current release"))
    for line in [*wave_lines(document.get("rollout")), *queue_lines(document.get("connections"))]:
        out.print(line, highlight=False)
    for warning in document.get("warnings", []):
        out.print(text(f"warning: {warning}", "yellow"), highlight=False)
    if document.get("log"):
        out.print(text(f"run log: {document['log']} (orch history --show {document['run_id']})"))


def wave_lines(rollout: dict[str, Any] | None) -> list[str]:
    """`wave 2 of 5: 16 containers, deployed 15, rolled_back 1, 41.2 s` per wave."""
    if not rollout:
        return []
    waves = rollout["waves"]
    lines = []
    for wave in waves:
        results = ", ".join(f"{name} {count}" for name, count in sorted(wave["results"].items()))
        kind = "canary" if wave["kind"] == "canary" else "wave"
        pause = f", then paused {wave['paused']:g} s" if wave["paused"] else ""
        lines.append(
            f"{kind} {wave['wave']} of {len(waves)}: {len(wave['targets'])} container(s), "
            f"{results}, {wave['seconds']:.1f} s{pause}"
        )
    return lines


def queue_lines(connections: list[dict[str, Any]] | None) -> list[str]:
    """Hosts where more commands were due at once than one connection's sessions allow."""
    return [
        f"{c['endpoint']}: {c['waited']} command(s) queued for a session on its one SSH "
        f"connection (max_sessions {c['max_sessions']}, peak {c['peak_sessions']}, "
        f"{c['refused']} open(s) refused by sshd and tried again)"
        for c in connections or []
        if c["waited"]
    ]


def context_table(phases: list[dict[str, Any]]) -> Table:
    """One row per gate phase: which context, endpoint and template settings each figure
    came from."""
    table = Table(title="by context", title_justify="left", box=None, padding=(0, 1))
    for column in ("context", "tokens", "endpoint", "template", "gate", "mean length", "drafts"):
        table.add_column(column)
    for phase in phases:
        upper = phase["max_tokens"]
        settings = phase["chat_template_kwargs"]
        mean = phase["mean_acceptance_length"]
        table.add_row(
            phase["context"],
            f"{phase['min_tokens']}..{'' if upper is None else upper}",
            phase["endpoint"],
            "" if settings is None else json.dumps(settings),
            phase["verdict"],
            "" if mean is None else f"{mean:.2f}",
            str(phase["drafts"]),
        )
    return table


def acceptance_bars(rates: list[float], width: int = 40) -> str:
    """`pos  1 ████████░░ 0.80` per position: where the drafts stop being accepted."""
    return "\n".join(
        f"  pos {i:2d} {'█' * round(rate * width)}{'░' * (width - round(rate * width))} {rate:.3f}"
        for i, rate in enumerate(rates, 1)
    )


def print_json(document: Any) -> None:
    print(json.dumps(document, indent=2, default=str))


def print_verify(document: dict[str, Any]) -> None:
    """Per container: hand edits first (they fail the check), then what the playbook
    would change now (information, with the deploy that applies it)."""
    out = console()
    for target in document["targets"]:
        out.rule(text(f"{target['name']} on {target['host']}: release {target.get('release')}"))
        if target.get("error"):
            out.print(text(target["error"], "red"), highlight=False)
        for change in target.get("changed_on_target", []):  # whole lines, as diff prints them
            out.print(text(change, "red"), highlight=False, soft_wrap=True)
        for change in target.get("playbook_differs", []):
            out.print(text(change, "yellow"), highlight=False, soft_wrap=True)
        if target.get("apply_with"):
            out.print(text(f"apply it with: {target['apply_with']}"), soft_wrap=True)
        if target.get("findings"):
            out.print(findings_table([Finding(**f) for f in target["findings"]]))
    ok = document["result"] == "ok"
    out.print(text("ok") if ok else text("problems found", "red"))


def print_releases(document: dict[str, Any]) -> None:
    """One row per run and container, newest run first; then the releases kept on a
    container that no listed run names. Ids are never cut (they are typed back): on a
    narrow terminal the other columns go, WHEN and USER first."""
    out = console()
    rows = []
    for run in document["runs"]:
        for i, target in enumerate(run["targets"]):
            rows.append(
                {
                    "RUN": run["run_id"] if i == 0 else "",
                    "ACTION": run["action"] if i == 0 else "",
                    "CONTAINER": target["name"],
                    "RESULT": target["result"] or "",
                    "LEFT ON": target["release"] or "-",
                    "NOW": target["state"],
                    "USER": run["user"] if i == 0 else "",
                    "WHEN": run["time"] if i == 0 else "",
                }
            )
    title = text(f"{document['playbook']}: runs as the containers record them")
    out.print(_fitted_table(rows, ["WHEN", "USER", "ACTION", "NOW", "RESULT"], out, title))
    unnamed = []
    for target in document["targets"]:
        if target.get("error"):
            out.print(text(f"{target['name']}: {target['error']}", "red"), highlight=False)
        unnamed += [
            {
                "CONTAINER": target["name"],
                "RELEASE": kept["release"],
                "NOW": "current" if kept["current"] else "kept",
                "WRITTEN BY RUN": kept["made_by_run"] or "unknown",
                "CREATED": kept["created"] or "unknown",
            }
            for kept in target.get("kept", [])
            if not kept["named_by_a_run"]
        ]
    if unnamed:
        title = text("kept on the containers, left current by no listed run")
        out.print(_fitted_table(unnamed, ["CREATED", "WRITTEN BY RUN", "NOW"], out, title))
    if not document["runs"] and not unnamed:
        out.print("no runs recorded on these containers: nothing deployed yet", highlight=False)


def _fitted_table(
    rows: list[dict[str, str]], droppable: list[str], out: Console, title: Text
) -> Table:
    """A table of whole cells, never wrapped: the `droppable` columns are left out,
    first to last, until the rest fits the console."""
    columns = list(rows[0]) if rows else []

    def build() -> Table:
        table = Table(title=title)
        for name in columns:
            table.add_column(name, no_wrap=True)
        for row in rows:
            table.add_row(*(text(row[name]) for name in columns))
        return table

    table = build()
    for name in droppable:
        if out.measure(table, options=out.options.update(max_width=1 << 16)).maximum <= out.width:
            break
        columns.remove(name)
        table = build()
    return table


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
                *(
                    text(run.get(key) or "")
                    for key in ("started", "user", "command", "playbook", "model", "method")
                ),
                text(run.get("drafter") or ""),
                text(run["run_id"]),
                text(target["name"]),
                text(target["result"]),
                _mean_length(target),
                _position1(target),
                text(target.get("release") or ""),
                text(target.get("previous_release") or ""),
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
