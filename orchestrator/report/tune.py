"""What `orch tune` prints: a row per drafting depth and speed level (acceptance, total
tokens/s and speedup with their bounds), a bar per depth at each level, the best depth
per level, the line that applies it, and where the container ended."""

from __future__ import annotations

from collections.abc import Sequence

from rich.bar import Bar
from rich.table import Table
from rich.text import Text

from orchestrator.documents.tune import Tune
from orchestrator.metrics.speed import Figure
from orchestrator.report.screen import Cell, Column, console, fitted_table, mean_length, text
from orchestrator.tuning import Best, TuneStep

COLUMNS = [
    Column("depth", identifier=True, justify="right"),
    Column("streams", justify="right"),
    Column("result"),
    Column("gate"),
    Column("acceptance", justify="right"),
    Column("total tok/s", justify="right"),
    Column("speedup", justify="right", drop=1),
    Column("run", identifier=True, drop=2),
]
BAR_WIDTH = 30

ENDINGS = {
    "best": "on the best passing depth",
    "restored": "on the release it started from (--restore)",
    "last": "on what its last deploy left (see that run)",
    "interrupted": "stopped by a signal, on the gated release serving then",
    "none_passed": "no depth passed: each failing deploy rolled back to the release before it",
}


def figure_words(figure: Figure | None, unit: str = "", digits: int = 0) -> str:
    """`mean (lower-upper)`, the bounds left out when there are none."""
    if figure is None:
        return "-"
    mean = f"{figure.mean:.{digits}f}{unit}"
    if figure.lower is None or figure.upper is None:
        return mean
    return f"{mean} ({figure.lower:.{digits}f}-{figure.upper:.{digits}f})"


def tune_rows(steps: Sequence[TuneStep]) -> list[list[Cell]]:
    """One row per depth and level; a depth without speed levels gets one row."""
    rows: list[list[Cell]] = []
    for step in steps:
        head: list[Cell] = [
            str(step.value),
            "",
            step.result,
            step.verdict or "-",
            mean_length(step.mean_acceptance_length),
        ]
        tail: list[Cell] = ["-", "-", step.run_id]
        if not step.levels:
            rows.append(head + tail)
        for level in step.levels:
            head[1] = str(level.concurrency)
            rows.append(
                [
                    *head,
                    figure_words(level.total_tokens_per_second, digits=1),
                    figure_words(level.speedup, "x", 2),
                    step.run_id,
                ]
            )
    return rows


def chart(steps: Sequence[TuneStep], best: Sequence[Best]) -> Table:
    """Per level, a horizontal bar per depth: its speedup where every bar at the level
    has one, else its total tokens/s, scaled to the level's largest."""
    grid = Table.grid(padding=(0, 1))
    for concurrency in sorted({lv.concurrency for s in steps for lv in s.levels}):
        at = [(s, lv) for s in steps for lv in s.levels if lv.concurrency == concurrency]
        by_speedup = all(lv.speedup for _, lv in at)
        figures = [lv.speedup if by_speedup else lv.total_tokens_per_second for _, lv in at]
        top = max((f.mean for f in figures if f), default=0.0)
        measure = "speedup" if by_speedup else "total tok/s"
        grid.add_row(Text(f"{concurrency} streams, {measure}:", style="bold"))
        winner = next((b.value for b in best if b.concurrency == concurrency), None)
        for (step, _), figure in zip(at, figures, strict=True):
            mean = figure.mean if figure else 0.0
            style = "green" if step.value == winner else ("red" if not step.passed else "cyan")
            bar = Bar(top or 1.0, 0, mean, width=BAR_WIDTH, color=style)
            words = f"{mean:.2f}x" if by_speedup else f"{mean:.1f}"
            grid.add_row(Text(f"  k={step.value:<3}"), bar, Text(words))
    return grid


def print_tune(doc: Tune) -> None:
    out = console()
    out.print(text(f"orch tune {doc.playbook} on {doc.target}: {doc.field}"), crop=False)
    out.print(fitted_table(out, COLUMNS, tune_rows(doc.steps)), crop=False)
    if any(step.levels for step in doc.steps):
        out.print(chart(doc.steps, doc.best), crop=False)
    for best in doc.best:
        measure = "speedup" if best.by == "speedup" else "total tok/s"
        figure = figure_words(best.figure, digits=2)
        line = f"best at {best.concurrency} streams: {best.value} ({measure} {figure})"
        out.print(text(line), crop=False)
    if doc.chosen is not None:
        out.print(
            text(f"apply it: {doc.apply_with}   (playbook, under server: {doc.playbook_line})"),
            crop=False,
        )
    current = doc.current or "no release"
    out.print(text(f"{doc.target} ended {ENDINGS[doc.ended]}: {current}"), crop=False)
