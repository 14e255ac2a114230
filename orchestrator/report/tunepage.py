"""`orch report` of a tune: what `orch tune` printed, as a page: the table of depth x
speed level, the chart of each level's speedup (or total tokens/s) per depth with the
best passing depth marked, the best per level, the line that applies it and where the
container ended."""

from __future__ import annotations

from orchestrator.documents.tune import Tune
from orchestrator.report.page import BarGroup, Chart, ChartBar, Section, Table
from orchestrator.report.tune import ENDINGS, chart_levels, figure_words


def tune_chart(doc: Tune) -> Chart:
    groups = [
        BarGroup(
            level.title,
            [
                ChartBar(
                    f"k={step.value}",
                    figure.mean if figure else 0.0,
                    level.bounded(figure),
                    best=step.value == level.best,
                    failed=not step.passed,
                )
                for step, figure in level.figures
            ],
        )
        for level in chart_levels(doc.steps, doc.best)
    ]
    return Chart(f"{doc.field} per speed level", groups)


def sections(doc: Tune, user: str) -> list[Section]:
    """The tune's page, renderer-neutral."""
    overview = Section(f"tune {doc.playbook} on {doc.target}: {doc.result}", level=1)
    overview.facts = [
        ("run", doc.run_id),
        ("who", user),
        ("when", doc.started),
        ("field", doc.field),
        ("values", ", ".join(map(str, doc.values))),
        ("started on", doc.started_on or "no release"),
        ("ended", f"{ENDINGS[doc.ended]}: {doc.current or 'no release'}"),
    ]
    if doc.chosen is not None:
        applied = f"{doc.apply_with}   (under server: {doc.playbook_line})"
        overview.facts.append(("apply it", applied))
    if doc.final_run_id:
        overview.facts.append(("final run", doc.final_run_id))
    overview.notes += doc.warnings
    rows = []
    for step in doc.steps:
        length = step.mean_acceptance_length
        acceptance = "" if length is None else f"{length:.2f}"
        head = [str(step.value), step.result, step.verdict or "-", acceptance]
        rows += [
            [
                *head[:1],
                str(level.concurrency),
                *head[1:],
                figure_words(level.total_tokens_per_second, digits=1),
                figure_words(level.speedup, "x", 2),
                step.run_id,
            ]
            for level in step.levels
        ] or [[*head[:1], "", *head[1:], "-", "-", step.run_id]]
    overview.tables.append(
        Table(
            ["depth", "streams", "result", "gate", "acceptance", "total tok/s", "speedup", "run"],
            rows,
        )
    )
    best = Section("best per level", level=2)
    best.tables.append(
        Table(
            ["streams", "best depth", "by", "figure"],
            [
                [str(b.concurrency), str(b.value), b.by, figure_words(b.figure, digits=2)]
                for b in doc.best
            ],
        )
    )
    if any(step.levels for step in doc.steps):
        best.charts.append(tune_chart(doc))
    return [overview, best]
