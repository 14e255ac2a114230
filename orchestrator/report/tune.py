"""What `orch tune` prints: a row per drafting depth and speed level (acceptance, total
tokens/s and speedup with their bounds), a bar per depth at each level, the best depth
per level, the line that applies it, and where the container ended."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True)
class ChartLevel:
    """One level of the chart: its measure and each depth's figure there (None: not
    measured), with the best passing depth's value."""

    concurrency: int
    by_speedup: bool
    figures: list[tuple[TuneStep, Figure | None]]
    best: int | None

    @property
    def title(self) -> str:
        return f"{self.concurrency} streams, {'speedup' if self.by_speedup else 'total tok/s'}"

    def words(self, figure: Figure | None) -> str:
        mean = figure.mean if figure else 0.0
        return f"{mean:.2f}x" if self.by_speedup else f"{mean:.1f}"

    def bounded(self, figure: Figure | None) -> str:
        """The figure with its bound, as the table shows it."""
        if self.by_speedup:
            return figure_words(figure, "x", 2)
        return figure_words(figure, digits=1)


def chart_levels(steps: Sequence[TuneStep], best: Sequence[Best]) -> list[ChartLevel]:
    """Per level, each depth's speedup where every depth at the level has one, else its
    total tokens/s (the terminal's chart and the report's draw the same)."""
    out = []
    for concurrency in sorted({lv.concurrency for s in steps for lv in s.levels}):
        at = [(s, lv) for s in steps for lv in s.levels if lv.concurrency == concurrency]
        by_speedup = all(lv.speedup for _, lv in at)
        figures = [(s, lv.speedup if by_speedup else lv.total_tokens_per_second) for s, lv in at]
        winner = next((b.value for b in best if b.concurrency == concurrency), None)
        out.append(ChartLevel(concurrency, by_speedup, figures, winner))
    return out


def chart(steps: Sequence[TuneStep], best: Sequence[Best]) -> Table:
    """Per level, a horizontal bar per depth, scaled to the level's largest."""
    grid = Table.grid(padding=(0, 1))
    for level in chart_levels(steps, best):
        top = max((f.mean for _, f in level.figures if f), default=0.0)
        grid.add_row(Text(f"{level.title}:", style="bold"))
        for step, figure in level.figures:
            mean = figure.mean if figure else 0.0
            style = "green" if step.value == level.best else ("red" if not step.passed else "cyan")
            bar = Bar(top or 1.0, 0, mean, width=BAR_WIDTH, color=style)
            grid.add_row(Text(f"  k={step.value:<3}"), bar, Text(level.words(figure)))
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
