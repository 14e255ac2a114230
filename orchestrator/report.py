"""What `orch` prints: rich tables for people, one JSON document for programs.

Much of what is printed comes from elsewhere: lock owners, server logs, remote
errors, inventory names. Rich markup is therefore off, styles are given as
`Text` styles, and every piece of such text goes through `text()`, which
shows control characters (a terminal escape in a lock owner) as escapes.
"""

from __future__ import annotations

import json
import sys
import textwrap
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from orchestrator.documents import document
from orchestrator.drafters.findings import Finding, Severity
from orchestrator.drafters.kinds import get_kind
from orchestrator.probes.sampling import describe

if TYPE_CHECKING:
    from orchestrator.drafters.profiles import Profile
    from orchestrator.plan import TargetPlan
    from orchestrator.verify import Judged


# C0 and C1 control characters but newline and tab, shown as Python escapes.
_CONTROLS = {
    code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)] if chr(code) not in "\n\t"
}


HEARTBEAT_SECONDS = 5.0
FOLD_AFTER = 24  # free text up to this wide stays on one line; longer folds


def console(stderr: bool = False) -> Console:
    """Results go to stdout, progress to stderr. Rich honours NO_COLOR (colour only)
    and falls back to plain text off a terminal; no markup. Lines are never wrapped
    by orch (a pipe gets whole lines, a terminal wraps them); tables fit the width."""
    return Console(soft_wrap=True, markup=False, stderr=stderr)


@dataclass(frozen=True)
class Column:
    """A table column. An `identifier` is typed back by users (ids, names): never cut,
    never left out. Only a `fold` column (free text) wraps; on a narrow terminal the
    others go, highest `drop` first (0: never)."""

    header: str
    identifier: bool = False
    drop: int = 0
    justify: str = "left"
    fold: bool = False


Cell = str | Text


def fitted_table(
    out: Console, columns: Sequence[Column], rows: Sequence[Sequence[Cell]]
) -> RenderableType:
    """A table that fits `out`'s width (print it with crop=False): free text folds,
    other columns go (a note says which); when even the identifiers do not fit side by
    side, one record per row. A column with nothing in it is left out."""
    filled = [i for i in range(len(columns)) if any(_plain(row[i]) for row in rows)]
    keep = list(filled)
    unbounded = out.options.update(width=1_000_000)
    while True:
        table = _table(columns, rows, keep, wrap_headers=False)
        if Measurement.get(out, unbounded, table).minimum > out.width:
            table = _table(columns, rows, keep, wrap_headers=True)
        if Measurement.get(out, unbounded, table).minimum <= out.width:
            dropped = [columns[i].header for i in filled if i not in keep]
            if not dropped:
                return table
            note = f"(narrow terminal: {', '.join(dropped)} not shown)"
            return Group(table, Text(textwrap.fill(note, out.width)))
        droppable = [i for i in keep if columns[i].drop and not columns[i].identifier]
        if not droppable:
            return _records(columns, rows)
        keep.remove(max(droppable, key=lambda i: columns[i].drop))


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _table(
    columns: Sequence[Column], rows: Sequence[Sequence[Cell]], keep: list[int], wrap_headers: bool
) -> Table:
    """Every column but free text exactly as wide as its widest cell (its header on
    one line, or with `wrap_headers` a line per word), so nothing in it is cut; free
    text folds only beyond FOLD_AFTER."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
    for i in keep:
        column = columns[i]
        header = max(column.header.split(), key=len) if wrap_headers else column.header
        natural = max([len(header), *(Text(_plain(row[i])).cell_len for row in rows)])
        table.add_column(
            column.header,
            width=None if column.fold else natural,
            min_width=min(natural, FOLD_AFTER) if column.fold else None,
            overflow="fold",
            justify=column.justify,  # type: ignore[arg-type]
        )
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def _records(columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> RenderableType:
    """Each row as `HEADER  value` lines, for a terminal too narrow for any table; an
    identifier stays on one line (the terminal may wrap it, nothing cuts it)."""
    width = max(len(c.header) for c in columns)
    lines: list[Text] = []
    for row in rows:
        for column, cell in zip(columns, row, strict=True):
            if _plain(cell):
                line = Text(f"{column.header:<{width}}  ") + Text(_plain(cell))
                if column.identifier:
                    line.no_wrap, line.overflow = True, "ignore"
                lines.append(line)
        lines.append(Text(""))
    return Group(*lines)


def mean_length(value: float | None) -> str:
    """An acceptance length as people read it: 4.23 (empty when not measured)."""
    return "" if value is None else f"{value:.2f}"


def ago(iso_time: str | float, now: float | None = None) -> str:
    """`3m ago` for a time given as ISO 8601 or seconds since the epoch."""
    then = (
        iso_time
        if isinstance(iso_time, float | int)
        else datetime.fromisoformat(iso_time).astimezone(UTC).timestamp()
    )
    seconds = max(0, int((now if now is not None else time.time()) - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


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


def print_findings(
    findings: list[Finding], as_json: bool = False, judged: Judged | None = None
) -> None:
    """Offline findings, after the kind they were judged as (when a drafter config was read)."""
    if as_json:
        print_json(
            document(
                "Findings",
                result="not_applied" if has_errors(findings) else "ok",
                judged_as=judged.to_dict() if judged else None,
                findings=[f.to_dict() for f in sorted_findings(findings)],
            )
        )
        return
    out = console()
    if judged:
        out.print(Text(judged.line()))
    if findings:
        out.print(findings_table(findings))
    errors = sum(f.severity == Severity.ERROR for f in findings)
    out.print(f"{errors} error(s), {len(findings) - errors} warning(s)")


def profile_entries(profiles: Iterable[Profile]) -> list[dict[str, Any]]:
    """Each profile's name, kind and target, then the fields its kind tells profiles apart by."""
    return [
        {
            "name": p.name,
            "kind": p.kind,
            "target": p.target_name,
            **get_kind(p.kind).describe(p),
            "notes": list(p.notes),
        }
        for p in profiles
    ]


def print_profiles(profiles: Iterable[Profile], as_json: bool = False) -> None:
    entries = profile_entries(profiles)
    if as_json:
        print_json(document("Profiles", profiles=entries))
        return
    rows = []
    for entry in entries:
        fields = {k: v for k, v in list(entry.items())[3:] if k != "notes"}
        details = "; ".join(
            f"{key} {value if isinstance(value, str) else json.dumps(value)}"
            for key, value in fields.items()
        )
        rows.append(
            [text(entry["name"]), text(entry["kind"]), text(entry["target"]), text(details)]
        )
    out = console()
    columns = [
        Column("PROFILE", identifier=True),
        Column("KIND"),
        Column("TARGET", drop=2),
        Column("DETAILS", fold=True),
    ]
    out.print(fitted_table(out, columns, rows), crop=False)
    for entry in entries:
        for note in entry["notes"]:
            out.print(text(f"note: {entry['name']}: {note}"))


def render_document(
    playbook: str, plans: Iterable[TargetPlan], written: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    """`orch render --json`: each container's files as a deploy would write them (and,
    with --output, the local files they went to)."""
    targets = []
    for plan in plans:
        targets.append(
            {
                "name": plan.container,
                "host": plan.host,
                "release": plan.release_id,
                "result": "error" if has_errors(plan.findings) else "ok",
                "release_dir": plan.release_dir,
                "files": {name: data.decode() for name, data in plan.files.items()},
                "findings": [f.to_dict() for f in sorted_findings(plan.findings)],
                **({"written": written[plan.container]} if written is not None else {}),
            }
        )
    failed = any(t["result"] == "error" for t in targets)
    return document(
        "Render", playbook=playbook, result="not_applied" if failed else "ok", targets=targets
    )


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


def print_lab_status(doc: dict[str, Any]) -> None:
    """`orch lab status`: one row per container of the lab."""
    rows = [
        [
            text(t["name"]),
            text(str(t["vmid"])),
            text(t["host"]),
            text(t["access"]),
            text(t["ssh"]),
            text("up" if t["sshd_up"] else "down"),
            text(t["status"]),
            text(", ".join(f"pid {pid}" for pid in t["servers"])),
        ]
        for t in doc["targets"]
    ]
    columns = [
        Column("CONTAINER", identifier=True),
        Column("VMID", drop=3),
        Column("HOST", drop=4),
        Column("ACCESS", drop=2),
        Column("SSH", drop=5),
        Column("SSHD", drop=1),
        Column("STATUS"),
        Column("SERVERS"),
    ]
    out = console()
    out.print(fitted_table(out, columns, rows), crop=False)


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

    def __init__(self, view: StepView, as_json: bool) -> None:
        self.view = view
        self.enabled = not as_json  # with --json the document has the diffs
        # A live view redirects sys.stdout through itself; diffs go to the real one.
        self.stdout: TextIO = getattr(sys.stdout, "rich_proxied_file", sys.stdout)
        self.lock = threading.Lock()

    def __call__(self, container: str, diff: str) -> None:
        if not (diff and self.enabled):
            return
        with self.lock:
            live = self.view.live
            if live is not None and self.stdout.isatty():
                live.console.print(text(diff.rstrip("\n")), soft_wrap=True, highlight=False)
            else:
                write_plain(diff, self.stdout)


@dataclass
class _Step:
    step: str
    since: float  # when this kind of step began: a long wait counts as one
    detail: str = ""
    said: float = 0.0  # when a line about it was last printed (off a terminal)


class StepView:
    """Per-container current step, on stderr: a live table on a terminal; elsewhere
    one line per step and, during a long wait, a heartbeat line every few seconds."""

    def __init__(self, names: list[str], enabled: bool = True) -> None:
        self.out = console(stderr=True)
        self.enabled = enabled
        self.live_mode = enabled and self.out.is_terminal
        started = time.monotonic()
        self.steps = {n: _Step("waiting", started) for n in names}
        self.started = started
        self.live: Live | None = None
        self.lock = threading.Lock()

    def _table(self) -> Table:
        table = Table(box=None)
        table.add_column("CONTAINER", no_wrap=True)
        table.add_column("STEP")
        table.add_column("FOR", justify="right")
        table.add_column("LAST SEEN", no_wrap=True, overflow="ellipsis", max_width=60)
        for name, step in self.steps.items():
            since = f"{time.monotonic() - step.since:5.1f}s"
            table.add_row(text(name), text(step.step), since, text(step.detail))
        return table

    def __call__(self, name: str, step: str, detail: str = "") -> None:
        with self.lock:
            now = time.monotonic()
            previous = self.steps.get(name)
            # "wait ready (up to 120 s)" after "wait ready": the same wait goes on
            same = previous is not None and previous.step.split(" (")[0] == step.split(" (")[0]
            if previous is not None and same:
                previous.step, previous.detail = step, detail or previous.detail
                current = previous
            else:
                current = self.steps[name] = _Step(step, now, detail)
            if self.live:
                self.live.update(self._table())
            elif self.enabled and not same:
                self._say(now, f"{name}: {step}")
                current.said = now
            elif self.enabled and now - current.said >= HEARTBEAT_SECONDS:
                seen = f"; {current.detail}" if current.detail else ""
                self._say(now, f"{name}: {step}, {now - current.since:.0f} s so far{seen}")
                current.said = now

    def _say(self, now: float, line: str) -> None:
        self.out.print(text(f"{now - self.started:6.1f}s {line}"), highlight=False)

    def describe(self) -> str:
        """What each container is doing now, for a message while it finishes."""
        with self.lock:
            return "; ".join(f"{name}: {step.step}" for name, step in self.steps.items())

    def __enter__(self) -> StepView:
        if self.live_mode:
            self.live = Live(
                self._table(),
                console=self.out,
                refresh_per_second=4,
                get_renderable=self._table,
                transient=True,
                redirect_stdout=False,  # stdout is for results; the view is on stderr
            )
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.__exit__(None, None, None)


def _mean_length(target: dict[str, Any]) -> str:
    return mean_length((target.get("gate") or {}).get("mean_acceptance_length"))


def words(value: str) -> str:
    """A result or state word as people read it: `not_applied` -> `not applied`."""
    return value.replace("_", " ")


def print_run(doc: dict[str, Any]) -> None:
    """The final table of a deploy or rollback, with per-position acceptance bars."""
    out = console()
    out.print(
        text(f"{doc['playbook']} run {doc['run_id']}: {words(doc['result'])}"),
        highlight=False,
    )
    columns = [
        Column("CONTAINER", identifier=True),
        Column("RESULT"),
        Column("RELEASE", identifier=True),
        Column("PREVIOUS", identifier=True, drop=3),
        Column("GATE", drop=2),
        Column("MEAN LENGTH", drop=1, justify="right"),
        Column("DRAFTS", drop=4, justify="right"),
    ]
    rows: list[list[Cell]] = []
    for target in doc["targets"]:
        gate = target.get("gate") or {}
        rows.append(
            [
                text(target["name"]),
                text(words(target["result"])),
                text(target.get("release") or ""),
                text(target.get("previous_release") or ""),
                text(gate.get("verdict") or ""),
                _mean_length(target),
                str(gate.get("drafts") or ""),
            ]
        )
    out.print(fitted_table(out, columns, rows), crop=False)
    if to := doc.get("to"):
        state = f"the state run {to['run_id']} left" if to["run_id"] else f"release {to['release']}"
        out.print(text(f"--to {to['query']}: back to {state}"), highlight=False)
    for target in doc["targets"]:
        for label, key in (("gate", "gate"), ("rollback gate", "rollback_gate")):
            gate = target.get(key)
            if gate:
                out.print(
                    text(target["name"], "bold") + text(f" {label}: {gate['reason']}"),
                    highlight=False,
                )
                if gate.get("sampling"):
                    out.print(text(f"  probed at {describe(gate['sampling'])}"), highlight=False)
                if gate.get("explanation"):
                    out.print(text(f"  why: {gate['explanation']}"), highlight=False)
                out.print(acceptance_bars(gate.get("per_position_acceptance") or []))
                if gate.get("by_context"):
                    out.print(context_table(out, gate["by_context"]), crop=False)
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
    for line in [*wave_lines(doc.get("rollout")), *queue_lines(doc.get("connections"))]:
        out.print(line, highlight=False)
    for warning in doc.get("warnings", []):
        out.print(text(f"warning: {warning}", "yellow"), highlight=False)
    if doc.get("log"):
        out.print(text(f"run log: {doc['log']} (orch history --show {doc['run_id']})"))


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


CONTEXT_COLUMNS = [
    Column("CONTEXT"),
    Column("TOKENS"),
    Column("ENDPOINT"),
    Column("TEMPLATE", fold=True, drop=1),
    Column("GATE"),
    Column("MEAN LENGTH", justify="right"),
    Column("DRAFTS", drop=2, justify="right"),
]


def context_table(out: Console, phases: list[dict[str, Any]]) -> RenderableType:
    """One row per gate phase: which context, endpoint and template settings each figure
    came from."""
    rows: list[list[Cell]] = []
    for phase in phases:
        upper = phase["max_tokens"]
        settings = phase["chat_template_kwargs"]
        rows.append(
            [
                phase["context"],
                f"{phase['min_tokens']}..{'' if upper is None else upper}",
                phase["endpoint"],
                "" if settings is None else json.dumps(settings),
                phase["verdict"],
                mean_length(phase["mean_acceptance_length"]),
                str(phase["drafts"]),
            ]
        )
    return Group(Text("by context"), fitted_table(out, CONTEXT_COLUMNS, rows))


def acceptance_bars(rates: list[float], width: int = 40) -> str:
    """`pos  1 ████████░░ 0.80` per position: where the drafts stop being accepted."""
    return "\n".join(
        f"  pos {i:2d} {'█' * round(rate * width)}{'░' * (width - round(rate * width))} {rate:.3f}"
        for i, rate in enumerate(rates, 1)
    )


def print_json(doc: dict[str, Any]) -> None:
    """One document of the contract (documents.py) on stdout."""
    print(json.dumps(doc, indent=2, default=str))


def print_verify(doc: dict[str, Any]) -> None:
    """Per container: hand edits first (they fail the check), then what the playbook
    would change now (information, with the deploy that applies it)."""
    out = console()
    for target in doc["targets"]:
        release_id = target.get("release")
        on = f": release {release_id}" if release_id else ""
        out.rule(text(f"{target['name']} on {target['host']}{on}"))
        if target.get("error"):
            out.print(text(target["error"], "red"), highlight=False)
        if target.get("state") == "nothing_deployed":
            out.print(text(f"nothing deployed yet: orch deploy {doc['playbook']} -i INVENTORY"))
        for change in target.get("changed_on_target", []):  # whole lines, as diff prints them
            out.print(text(change, "red"), highlight=False)
        for change in target.get("playbook_differs", []):
            out.print(text(change, "yellow"), highlight=False)
        if target.get("apply_with"):
            out.print(text(f"apply it with: {target['apply_with']}"))
        if target.get("findings"):
            out.print(findings_table([Finding(**f) for f in target["findings"]]))
    ok = doc["result"] == "ok"
    out.print(text("ok") if ok else text(f"problems found: {words(doc['result'])}", "red"))


RELEASES_COLUMNS = [
    Column("RUN", identifier=True),
    Column("ACTION", drop=3),
    Column("CONTAINER", identifier=True),
    Column("RESULT", drop=2),
    Column("LEFT ON", identifier=True),
    Column("NOW", drop=4),
    Column("USER", drop=5),
    Column("WHEN", drop=6),
]
KEPT_COLUMNS = [
    Column("CONTAINER", identifier=True),
    Column("RELEASE", identifier=True),
    Column("NOW", drop=1),
    Column("WRITTEN BY RUN", identifier=True, drop=2),
    Column("CREATED", drop=3),
]


def print_releases(doc: dict[str, Any]) -> None:
    """One row per run and container, newest run first; then the releases kept on a
    container that no listed run names. Ids are never cut (they are typed back): on a
    narrow terminal the other columns go, WHEN and USER first."""
    out = console()
    rows: list[list[Cell]] = []
    for run in doc["runs"]:
        for i, target in enumerate(run["targets"]):
            first = i == 0
            rows.append(
                [
                    text(run["run_id"] if first else ""),
                    text(run["action"] if first else ""),
                    text(target["name"]),
                    text(words(target["result"] or "")),
                    text(target["release"] or "-"),
                    text(target["release_state"]),
                    text(run["user"] if first else ""),
                    text(run["time"] if first else ""),
                ]
            )
    out.print(text(f"{doc['playbook']}: runs as the containers record them"), highlight=False)
    out.print(fitted_table(out, RELEASES_COLUMNS, rows), crop=False)
    unnamed: list[list[Cell]] = []
    for target in doc["targets"]:
        if target.get("error"):
            out.print(text(f"{target['name']}: {target['error']}", "red"), highlight=False)
        unnamed += [
            [
                text(target["name"]),
                text(kept["release"]),
                text("current" if kept["current"] else "kept"),
                text(kept["made_by_run"] or "unknown"),
                text(kept["created"] or "unknown"),
            ]
            for kept in target.get("kept", [])
            if not kept["named_by_a_run"]
        ]
    if unnamed:
        out.print(text("kept on the containers, left current by no listed run"))
        out.print(fitted_table(out, KEPT_COLUMNS, unnamed), crop=False)
    if not doc["runs"] and not unnamed:
        out.print("no runs recorded on these containers: nothing deployed yet", highlight=False)


def _position1(target: dict[str, Any]) -> str:
    """Position-1 acceptance of the target's gate, comparable across methods."""
    positions = (target.get("gate") or {}).get("per_position_acceptance") or []
    return f"{positions[0]:.2f}" if positions else "-"


def _sampling(target: dict[str, Any]) -> str:
    """What the target's gate probes sampled at (empty: no gate, or before orch recorded it)."""
    sampling = (target.get("gate") or {}).get("sampling")
    return describe(sampling) if sampling else ""


HISTORY_COLUMNS = [
    Column("RUN", identifier=True),
    Column("CONTAINER", identifier=True),
    Column("RESULT"),
    Column("RELEASE", identifier=True),
    Column("MEAN LENGTH", drop=2, justify="right"),
    Column("POS-1", drop=6, justify="right"),
    Column("SAMPLING", drop=11),
    Column("PREVIOUS", identifier=True, drop=5),
    Column("STARTED", drop=3),
    Column("COMMAND", drop=1),
    Column("PLAYBOOK", identifier=True, drop=4),
    Column("USER", drop=7),
    Column("MODEL", drop=9),
    Column("METHOD", drop=8),
    Column("DRAFTER", drop=10),
]


def print_history(doc: dict[str, Any]) -> None:
    """One row per run and container; a run's own fields on its first row only."""
    rows: list[list[Cell]] = []
    for run in doc["runs"]:
        first = True
        for target in run["targets"]:
            own = [
                text(run.get(key) or "") if first else Text("")
                for key in ("started", "command", "playbook", "user", "model", "method", "drafter")
            ]
            rows.append(
                [
                    text(run["run_id"]) if first else Text(""),
                    text(target["name"]),
                    text(words(target["result"])),
                    text(target.get("release") or ""),
                    _mean_length(target),
                    _position1(target),
                    _sampling(target),
                    text(target.get("previous_release") or ""),
                    *own,
                ]
            )
            first = False
    out = console()
    if not rows:
        out.print("no runs recorded yet")
        return
    out.print(fitted_table(out, HISTORY_COLUMNS, rows), crop=False)


STATUS_COLUMNS = [
    Column("CONTAINER", identifier=True),
    Column("STATE"),
    Column("RELEASE", identifier=True),
    Column("SERVER", drop=3),
    Column("HEALTH", drop=4),
    Column("GATE", drop=5),
    Column("MEAN LENGTH", drop=2, justify="right"),
    Column("LOCKED BY", drop=1, fold=True),
    Column("HOST", drop=6),
]


def server_words(target: dict[str, Any]) -> str:
    """`running pid 1234`, `stopped`, or `not started`."""
    state = target.get("server")
    if state == "running":
        return f"running pid {target['pid']}"
    return "stopped" if state == "stopped" else ("not started" if state == "none" else "")


def locked_by(lock: dict[str, Any] | None) -> str:
    """`root@host 3m ago` for a lock orch wrote, its text for one it did not."""
    if not lock:
        return ""
    if "text" in lock:
        return lock["text"]
    return f"{lock['user']}@{lock['control_host']} {ago(lock['since'])}"


def print_status(doc: dict[str, Any]) -> None:
    out = console()
    rows: list[list[Cell]] = []
    for t in doc["targets"]:
        last = t.get("last_run") or {}
        health = t.get("health")
        rows.append(
            [
                text(t["name"]),
                text(words(t["state"])),
                text(t.get("release") or ""),
                text(server_words(t)),
                text("" if health is None else ("ok" if health == 200 else f"{health}")),
                text(last.get("verdict") or ""),
                mean_length(last.get("mean_acceptance_length")),
                text(locked_by(t.get("lock"))),
                text(t["host"]),
            ]
        )
    out.print(fitted_table(out, STATUS_COLUMNS, rows), crop=False)
    for t in doc["targets"]:
        for key in ("interrupted", "error"):
            if t.get(key):
                out.print(text(f"{t['name']}: {key}: {t[key]}", "red"), highlight=False)
    if doc["state"] == "nothing_deployed":
        out.print(text(f"nothing deployed yet: orch deploy {doc['playbook']} -i INVENTORY"))


def print_unlock(doc: dict[str, Any]) -> None:
    for t in doc["targets"]:
        if t["result"] == "error":
            line = f"error: {t['error']}"
        elif t["removed_lock"]:
            lock = t["removed_lock"]
            who = lock.get("text") or f"run {lock['run_id']} of {locked_by(lock)}"
            line = f"removed the lock held by {who}"
        else:
            line = "no lock"
        print(printable(f"{t['name']}: {line}"))


def doctor_document(checks: list[dict[str, str]]) -> dict[str, Any]:
    """`orch doctor --json`: the checks grouped per host or container, in order."""
    names = list(dict.fromkeys(c["target"] for c in checks))
    targets = []
    for name in names:
        own = [{k: v for k, v in c.items() if k != "target"} for c in checks if c["target"] == name]
        failed = any(c["status"] == "fail" for c in own)
        targets.append({"name": name, "result": "error" if failed else "ok", "checks": own})
    failed = any(c["status"] == "fail" for c in checks)
    return document("Doctor", result="needs_attention" if failed else "ok", targets=targets)


def print_checks(checks: list[dict[str, str]], as_json: bool = False) -> None:
    """`orch doctor`: one line per check (`fix:` under each failure), or one JSON document."""
    if as_json:
        print_json(doctor_document(checks))
        return
    target_width = max((len(c["target"]) for c in checks), default=0)
    check_width = max((len(c["check"]) for c in checks), default=0)
    for c in checks:  # plain lines: one per check, never wrapped, for grep and logs
        status = c["status"].upper() if c["status"] == "fail" else c["status"]
        print(
            printable(
                f"{c['target']:<{target_width}}  {c['check']:<{check_width}}  {status:<4}  "
                + c["detail"]
            )
        )
        if c["status"] == "fail" and c["fix"]:
            print(printable(" " * (target_width + check_width + 10) + f"fix: {c['fix']}"))
    failed = sum(c["status"] == "fail" for c in checks)
    print(f"{failed} check(s) failed" if failed else "ready to deploy")
