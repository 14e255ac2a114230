"""How anything reaches the screen: escaped text, tables fitted to the width, JSON.

Much of what is printed comes from elsewhere: lock owners, server logs, remote
errors, inventory names. Rich markup is therefore off, styles are given as
`Text` styles, and every piece of such text goes through `text()`, which
shows control characters (a terminal escape in a lock owner) as escapes.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from orchestrator.contract import Document, jsonable, run_result
from orchestrator.documents import Error, ErrorLine
from orchestrator.drafters.findings import Finding, Severity, sorted_findings
from orchestrator.secrets import mask_document

if TYPE_CHECKING:
    pass


# C0 and C1 control characters but newline and tab, shown as Python escapes; and the
# bidirectional controls (U+202E turns the rest of a line around), shown as \u escapes.
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_CONTROLS = {
    code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)] if chr(code) not in "\n\t"
} | {code: f"\\u{code:04x}" for code in _BIDI}


FOLD_AFTER = 24  # free text up to this wide stays on one line; longer folds, at spaces
WHOLE_WORD = 48  # a word up to this long (an id, a field path, a number) is never split
UNBOUNDED = 1_000_000  # the width of a pipe: whole lines


def console(stderr: bool = False) -> Console:
    """Results go to stdout, progress to stderr. Rich honours NO_COLOR (colour only)
    and falls back to plain text off a terminal; no markup. Lines are never wrapped
    by orch; tables fit a terminal's width, or COLUMNS. Off a terminal without
    COLUMNS nothing is fitted to a width: whole lines, as kubectl and Ansible print
    to a pipe (rich would assume 80 columns)."""
    out = Console(soft_wrap=True, markup=False, stderr=stderr)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = UNBOUNDED
    return out


def heading(out: Console, title: Text) -> None:
    """A rule with `title` in it on a terminal (or COLUMNS wide); a plain line of the
    title in a pipe."""
    if out.width >= UNBOUNDED:
        out.print(Text("== ") + title + Text(" =="), highlight=False)
    else:
        out.rule(title)


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
    """A table that fits `out`'s width (print it with crop=False): free text folds at
    word boundaries, other columns go (a note says which); when even the identifiers
    do not fit side by side, one record per row. A column with nothing in it is left
    out. In a pipe (`console()`'s unbounded width) every line is whole."""
    filled = [i for i in range(len(columns)) if any(_plain(row[i]) for row in rows)]
    keep = list(filled)
    while True:
        table = _table(columns, rows, keep, wrap_headers=False)
        if not _fits(out, table):
            table = _table(columns, rows, keep, wrap_headers=True)
        if _fits(out, table):
            dropped = [columns[i].header for i in filled if i not in keep]
            if not dropped:
                return _trimmed(out, table) if out.width >= UNBOUNDED else table
            note = f"(narrow terminal: {', '.join(dropped)} not shown)"
            return Group(table, Text(textwrap.fill(note, out.width)))
        droppable = [i for i in keep if columns[i].drop and not columns[i].identifier]
        if not droppable:
            return _records(columns, rows)
        keep.remove(max(droppable, key=lambda i: columns[i].drop))


def _trimmed(out: Console, table: Table) -> RenderableType:
    """`table` as its lines with no trailing blanks (a pipe: cells are not padded out
    to the widest row)."""
    lines = []
    for segments in Segment.split_lines(out.render(table, out.options)):
        line = Text()
        for segment in segments:
            line.append(segment.text, segment.style)
        line.rstrip()
        lines.append(line)
    return Group(*lines)


def _fits(out: Console, table: Table) -> bool:
    """Whether `table` fits `out`'s width with no column under its minimum (rich's
    measure) and, rendered, no line wider (its sharing of width can round past it)."""
    if out.width >= UNBOUNDED:
        return True
    unbounded = out.options.update(width=UNBOUNDED)
    if Measurement.get(out, unbounded, table).minimum > out.width:
        return False
    lines = Segment.split_lines(out.render(table, out.options))
    return max((Segment.get_line_length(line) for line in lines), default=0) <= out.width


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _table(
    columns: Sequence[Column], rows: Sequence[Sequence[Cell]], keep: list[int], wrap_headers: bool
) -> Table:
    """Every column but free text exactly as wide as its widest cell (its header on
    one line, or with `wrap_headers` a line per word), so nothing in it is cut; free
    text folds beyond FOLD_AFTER, at spaces, never inside a word up to WHOLE_WORD long
    (an id, a field path, a number)."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
    for i in keep:
        column = columns[i]
        header = max(column.header.split(), key=len) if wrap_headers else column.header
        natural = max([len(header), *(Text(_plain(row[i])).cell_len for row in rows)])
        word = max((len(w) for row in rows for w in _plain(row[i]).split()), default=0)
        table.add_column(
            column.header,
            width=None if column.fold else natural,
            min_width=max(min(natural, FOLD_AFTER), min(word, WHOLE_WORD)) if column.fold else None,
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


def printable(value: str) -> str:
    """`value` with its control characters shown as escapes, safe for a terminal."""
    return value.translate(_CONTROLS)


def text(value: Any, style: str = "") -> Text:
    """Text from anywhere, printed as it is: never markup, never a terminal escape."""
    return Text(printable(value if isinstance(value, str) else json.dumps(value)), style=style)


FINDINGS_COLUMNS = [
    Column("SEVERITY"),
    Column("FIELD", identifier=True),
    Column("EXPECTED", fold=True),
    Column("ACTUAL", fold=True),
    Column("HINT", fold=True),
]


def findings_table(
    out: Console, findings: Iterable[Finding], title: str | Text | None = None
) -> RenderableType:
    """Findings as a fitted table: the field path (what is typed back into --set) is
    never split, values and hints wrap at word boundaries."""
    rows: list[list[Cell]] = []
    for f in sorted_findings(findings):
        style = "red" if f.severity == Severity.ERROR else "yellow"
        rows.append(
            [
                text(str(f.severity), style),
                text(f.field),
                text(f.expected),
                text(f.actual),
                text(f.message),
            ]
        )
    table = fitted_table(out, FINDINGS_COLUMNS, rows)
    return Group(title if isinstance(title, Text) else text(title), table) if title else table


def write_plain(value: str, stream: TextIO | None = None) -> None:
    """`value` as it is, whole lines never wrapped, ending with a newline; control
    characters shown as escapes."""
    out = stream or sys.stdout
    out.write(printable(value) + ("" if value.endswith("\n") else "\n"))
    out.flush()


def words(value: str) -> str:
    """A result or state word as people read it: `not_applied` -> `not applied`."""
    return value.replace("_", " ")


def print_json(doc: Document) -> None:
    """One document of the contract (documents/) on stdout."""
    print(json_text(doc))


def json_text(doc: Document) -> str:
    """One document as JSON text, secrets masked in its strings (before JSON escapes
    them)."""
    return json.dumps(mask_document(jsonable(doc)), indent=2)


def print_json_line(doc: Document) -> None:
    """One document on one line, flushed: a stream of documents (`watch --json`, one a
    round) that a reader takes line by line as it comes."""
    sys.stdout.write(json.dumps(jsonable(doc)) + "\n")
    sys.stdout.flush()


_WHERE = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+)(?::(?P<column>\d+))?: "
    r"(?:(?P<field>[A-Za-z0-9_.\[\]-]+): )?(?P<message>.*)$"
)
_FILE = re.compile(r"^(?P<file>[^\s:]*[/.][^\s:]*): (?P<message>.*)$")


def error_entries(message: str) -> list[ErrorLine]:
    """An error's lines, each with where it points."""
    entries = []
    for text_line in filter(None, message.splitlines()):
        found = _WHERE.match(text_line) or _FILE.match(text_line)
        parts = found.groupdict() if found else {"message": text_line}
        entries.append(
            ErrorLine(
                file=parts.get("file"),
                line=int(parts["line"]) if parts.get("line") else None,
                column=int(parts["column"]) if parts.get("column") else None,
                field=parts.get("field"),
                message=parts["message"],
            )
        )
    return entries


def error_document(message: str, exit_code: int) -> Error:
    return Error(result=run_result(exit_code), message=message, errors=error_entries(message))
