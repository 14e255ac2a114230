"""`orch report RUN_ID`: one run as a self-contained page to share (Markdown or HTML).

Built from the run's `Report` document (documents/report.py: the run's document in
the local history, with the files' diff it read, and the time of each step from the
run's log); nothing is fetched. The page is built from sections of plain data
(`sections`), then written out by a renderer: in Markdown
(a text bar chart for the acceptance curve) or in HTML (an inline SVG; every value
escaped, no resource outside the page).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.documents.history import RecordedTarget
from orchestrator.documents.report import Report, TimedStep
from orchestrator.report.run import source_words
from orchestrator.report.screen import printable

BAR_WIDTH = 30


@dataclass
class Table:
    head: list[str]
    rows: list[list[str]]


@dataclass
class Curve:
    """Share of drafts accepting at least position i+1, with the position-1 minimum."""

    title: str
    shares: list[float]
    minimum: float | None


@dataclass
class Section:
    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    code: str | None = None
    notes: list[str] = field(default_factory=list)
    level: int = 2


def _number(value: Any, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _bounds(entry: dict[str, Any]) -> str:
    lower, upper = entry.get("lower"), entry.get("upper")
    return "" if lower is None or upper is None else f"{lower:.2f}..{upper:.2f}"


def _gate_section(title: str, gate: dict[str, Any]) -> Section:
    criteria = gate.get("criteria") or {}
    minimum = criteria.get("min_mean_acceptance_length")
    position1 = criteria.get("min_position1_acceptance")
    section = Section(title, level=4)
    section.facts = [
        ("verdict", str(gate.get("verdict"))),
        ("reason", str(gate.get("reason") or "")),
        (
            "threshold",
            f"mean acceptance length >= {minimum}"
            + (f", position-1 acceptance >= {position1}" if position1 is not None else "")
            + f", at least {criteria.get('min_drafts')} drafts,"
            f" {100 * criteria.get('confidence', 0):g}% bounds"
            if criteria
            else "not recorded (a run from before the thresholds were kept)",
        ),
    ]
    if gate.get("source"):
        section.facts.append(
            ("figures from", source_words(gate["source"], gate.get("source_note")))
        )
    if gate.get("explanation"):
        section.facts.append(("likely cause", str(gate["explanation"])))
    phases = gate.get("by_context") or []
    section.tables.append(
        Table(
            ["phase", "endpoint", "verdict", "mean length", "bound", "minimum", "drafts", "s"],
            [
                [
                    str(p.get("context")),
                    str(p.get("endpoint")),
                    str(p.get("verdict")),
                    _number(p.get("mean_acceptance_length")),
                    _bounds(p),
                    "" if minimum is None else f"{minimum:g}",
                    str(p.get("drafts")),
                    _number(p.get("seconds"), 1),
                ]
                for p in phases
            ],
        )
    )
    if gate.get("per_position_acceptance"):
        section.curves.append(
            Curve(f"{title}: per-position acceptance", gate["per_position_acceptance"], position1)
        )
    return section


def sections(report: Report) -> list[Section]:
    """The report's content, renderer-neutral."""
    run = report.run
    overview = Section(f"{run.command} {run.playbook}: {run.result}", level=1)
    overview.facts = [
        ("run", run.run_id),
        ("who", run.user),
        ("when", str(run.started)),
        ("playbook", run.playbook),
        ("method", f"{run.method} ({run.drafter}) serving {run.model}"),
        ("inventory", str(run.inventory or "not recorded")),
        ("--set", ", ".join(run.assignments) or "none"),
    ]
    if run.to:
        overview.facts.append(("to", run.to.query))
    overview.tables.append(
        Table(
            ["container", "host", "result", "from release", "to release", "current", "mean length"],
            [
                [
                    t.name,
                    str(t.host),
                    t.result,
                    str(t.previous_release),
                    str(t.release),
                    str(t.current),
                    _number((t.gate or {}).get("mean_acceptance_length")),
                ]
                for t in run.targets
            ],
        )
    )
    out = [overview]
    for target in run.targets:
        out += _target_sections(target, report.timeline(target.name))
    return out


def _target_sections(target: RecordedTarget, timeline: list[TimedStep]) -> list[Section]:
    name = target.name
    section = Section(f"{name}: {target.result}", level=2)
    if target.error:
        section.facts.append(("error", target.error))
    for note in target.notes:
        section.notes.append(str(note))
    if target.recovered:
        section.notes.append(f"recovered an interrupted run: {target.recovered}")
    seconds = target.steps
    section.tables.append(Table(["step", "seconds"], [[k, f"{v:.2f}"] for k, v in seconds.items()]))
    if timeline:
        section.tables.append(Table(["time", "step"], [[s.time, s.step] for s in timeline]))
    if target.findings:
        section.tables.append(
            Table(
                ["severity", "field", "finding"],
                [[f.severity, f.field, f.message] for f in target.findings],
            )
        )
    out = [section]
    changes = target.files_diff
    change = Section(f"{name}: what changed", level=3)
    if changes:
        change.code = changes
    else:
        change.notes.append(
            "no file differs from the release it replaced"
            if changes == ""
            else "the files' diff was not recorded for this run"
        )
    out.append(change)
    if target.gate:
        out.append(_gate_section(f"{name}: gate", target.gate))
    if target.rollback_gate:
        rollback = _gate_section(f"{name}: rollback to {target.current}", target.rollback_gate)
        out.append(rollback)
    return out


def bar(share: float, width: int = BAR_WIDTH) -> str:
    return "#" * round(max(0.0, min(share, 1.0)) * width)


MARKDOWN_ESCAPES: dict[str, str | int | None] = {
    **{char: f"\\{char}" for char in "\\`*[]!~|@"},
    "&": "&amp;",
    "<": "&lt;",
}
"""What could start markup anywhere in a Markdown text: code, emphasis, links and
images (`![x](http://...)` loses its `!` and brackets), strikethrough, table cells,
GFM's email autolinks; `&` and `<` as entities, so no HTML tag, `<...>` autolink or
character reference can open."""
LINK_STARTS = re.compile(r"(?i)(?<=[a-z0-9])(:)(?=//)|\b(www)(\.)|(?<![a-z0-9])(_)|(_)(?![a-z0-9])")
"""GFM's bare autolinks (`http://`, `www.`), broken by escaping their `:` or `.`; and `_`
where it can emphasise (not inside a word, as in `rolled_back`)."""


def markdown_text(value: str) -> str:
    """`value` as Markdown text that renders as itself: control characters shown as
    escapes, everything that could be markup escaped."""
    escaped = printable(value).translate(str.maketrans(MARKDOWN_ESCAPES))
    return LINK_STARTS.sub(_escape_link_start, escaped)


def _escape_link_start(found: re.Match[str]) -> str:
    colon, www, dot, opening, closing = found.groups()
    if www:
        return f"{www}\\{dot}"
    return "\\" + (colon or opening or closing)


def markdown(parts: list[Section]) -> str:
    """The report in Markdown; facts and table cells as text (`markdown_text`: nothing
    from a file, a log or a reply becomes markup, a link or an image), the diff in a
    fence longer than any run of backticks in it."""

    def cell(value: str) -> str:
        return markdown_text(value).replace("\n", " ")

    out: list[str] = []
    for section in parts:
        out += [f"{'#' * section.level} {cell(section.title)}", ""]
        out += [f"- **{key}**: {cell(value)}" for key, value in section.facts]
        out += [f"- {cell(note)}" for note in section.notes]
        if section.facts or section.notes:
            out.append("")
        for table in section.tables:
            out += [
                "| " + " | ".join(table.head) + " |",
                "|" + "---|" * len(table.head),
                *("| " + " | ".join(cell(c) for c in row) + " |" for row in table.rows),
                "",
            ]
        for curve in section.curves:
            out += [f"{cell(curve.title)}:", "", "```"]
            out += [
                f"{i + 1:>3} {bar(share):<{BAR_WIDTH}} {share:.2f}"
                for i, share in enumerate(curve.shares)
            ]
            if curve.minimum is not None:
                out.append(f"    position 1 must reach {curve.minimum:.2f}")
            out += ["```", ""]
        if section.code is not None:
            runs = re.findall(r"`+", section.code)
            fence = "`" * max(3, 1 + max(map(len, runs), default=0))
            out += [f"{fence}diff", printable(section.code).rstrip("\n"), fence, ""]
    return "\n".join(out)


def svg_curve(curve: Curve) -> str:
    """Bars of the per-position acceptance, 0..1, with the position-1 minimum as a line."""
    step, height, top = 28, 160, 10
    width = step * len(curve.shares) + 50
    out = [
        f'<svg width="{width}" height="{height + 40}" '
        f'role="img" aria-label="{html.escape(printable(curve.title))}">',
        f'<line x1="40" y1="{top + height}" x2="{width}" y2="{top + height}" stroke="#555"/>',
        f'<text x="2" y="{top + 4}" font-size="10">1.0</text>',
        f'<text x="2" y="{top + height}" font-size="10">0</text>',
    ]
    for i, share in enumerate(curve.shares):
        tall = round(max(0.0, min(share, 1.0)) * height, 1)
        x = 44 + i * step
        out.append(
            f'<rect x="{x}" y="{top + height - tall}" width="{step - 6}" height="{tall}" '
            f'fill="#3b73b9"><title>position {i + 1}: {share:.3f}</title></rect>'
        )
        out.append(f'<text x="{x + 4}" y="{top + height + 14}" font-size="10">{i + 1}</text>')
    if curve.minimum is not None:
        y = round(top + height - curve.minimum * height, 1)
        out.append(
            f'<line x1="40" y1="{y}" x2="{44 + step}" y2="{y}" stroke="#c0392b" '
            'stroke-dasharray="4 2"/>'
        )
        out.append(
            f'<text x="{44 + step + 4}" y="{y + 4}" font-size="10" fill="#c0392b">'
            f"position-1 minimum {curve.minimum:.2f}</text>"
        )
    out.append("</svg>")
    return "".join(out)


STYLE = """body{font-family:sans-serif;margin:2em;max-width:70em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #bbb;padding:2px 6px;
text-align:left}pre{background:#f4f4f4;padding:.5em;overflow-x:auto}"""


def to_html(parts: list[Section]) -> str:
    """The report as one HTML page: inline style and SVG, every value escaped, its
    control characters shown as escapes (the page is printed to a terminal too)."""

    def e(value: str) -> str:
        return html.escape(printable(value))

    title = e(parts[0].title if parts else "orch run")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{title}</title><style>{STYLE}</style></head><body>",
    ]
    for section in parts:
        out.append(f"<h{section.level}>{e(section.title)}</h{section.level}>")
        if section.facts or section.notes:
            out.append("<ul>")
            out += [f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in section.facts]
            out += [f"<li>{e(note)}</li>" for note in section.notes]
            out.append("</ul>")
        for table in section.tables:
            out.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in table.head) + "</tr>")
            out += [
                "<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in table.rows
            ]
            out.append("</table>")
        for curve in section.curves:
            out.append(
                f"<figure>{svg_curve(curve)}<figcaption>{e(curve.title)}</figcaption></figure>"
            )
        if section.code is not None:
            out.append(f"<pre>{e(section.code)}</pre>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
