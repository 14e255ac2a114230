"""A page to share (`orch report`): sections of plain data (facts, tables, charts, a
diff) and their two renderers: Markdown (text bar charts) and one self-contained HTML
page (inline SVG; every value escaped, no script, no resource outside the page).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

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
class ChartBar:
    """One bar: what it is (`k=4`), its length, its figure in words, and whether it is
    the best of its group or failed (drawn apart)."""

    label: str
    value: float
    words: str
    best: bool = False
    failed: bool = False


@dataclass
class BarGroup:
    """Bars measured alike (one speed level, one figure), scaled to their largest."""

    title: str
    bars: list[ChartBar]


@dataclass
class Chart:
    title: str
    groups: list[BarGroup]


@dataclass
class Section:
    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    code: str | None = None
    notes: list[str] = field(default_factory=list)
    level: int = 2


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
        for chart in section.charts:
            out += [f"{cell(chart.title)}:", "", "```", *text_chart(chart), "```", ""]
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


def _marks(chart_bar: ChartBar) -> str:
    return ("  best" if chart_bar.best else "") + ("  failed its gate" if chart_bar.failed else "")


def text_chart(chart: Chart) -> list[str]:
    """The chart as lines of text bars, each group scaled to its largest bar."""
    out: list[str] = []
    for group in chart.groups:
        top = max((b.value for b in group.bars), default=0.0) or 1.0
        out.append(printable(f"{group.title}:"))
        width = max((len(b.label) for b in group.bars), default=0)
        out += [
            printable(f"  {b.label:<{width}} {bar(b.value / top):<{BAR_WIDTH}} {b.words}")
            + _marks(b)
            for b in group.bars
        ]
    return out


CHART_ROW, CHART_LABEL, CHART_BAR = 18, 70, 300
"""A chart's row height, label column and longest bar, in pixels."""


def svg_chart(chart: Chart) -> str:
    """Horizontal bars, a block per group with its title, each group scaled to its
    largest bar; the best bar green and marked, a failed one red."""

    def e(value: str) -> str:
        return html.escape(printable(value))

    body: list[str] = []
    y = 0
    for group in chart.groups:
        y += CHART_ROW + 4
        body.append(
            f'<text x="0" y="{y}" font-size="12" font-weight="bold">{e(group.title)}</text>'
        )
        top = max((b.value for b in group.bars), default=0.0) or 1.0
        for b in group.bars:
            y += CHART_ROW
            width = round(max(0.0, b.value) / top * CHART_BAR, 1)
            fill = "#2e8b57" if b.best else "#c0392b" if b.failed else "#3b73b9"
            body += [
                f'<text x="8" y="{y}" font-size="11">{e(b.label)}</text>',
                f'<rect x="{CHART_LABEL}" y="{y - 12}" width="{width}" height="13" '
                f'fill="{fill}"><title>{e(b.label)}: {e(b.words)}{_marks(b)}</title></rect>',
                f'<text x="{CHART_LABEL + width + 6}" y="{y}" font-size="11">'
                f"{e(b.words)}{_marks(b)}</text>",
            ]
    width = CHART_LABEL + CHART_BAR + 260
    return (
        f'<svg width="{width}" height="{y + 8}" role="img" aria-label="{e(chart.title)}">'
        + "".join(body)
        + "</svg>"
    )


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
        for chart in section.charts:
            out.append(
                f"<figure>{svg_chart(chart)}<figcaption>{e(chart.title)}</figcaption></figure>"
            )
        if section.code is not None:
            out.append(f"<pre>{e(section.code)}</pre>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
