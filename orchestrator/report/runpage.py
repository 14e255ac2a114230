"""`orch report RUN_ID`: one run as a self-contained page to share (Markdown or HTML).

Built from the run's `Report` document (documents/report.py: the run's document in
the local history, with the files' diff it read, and the time of each step from the
run's log); nothing is fetched. The page's sections (`page.py`) are built here from a
deploy, rollback or baseline run, by `tunepage.py` from a tune.
"""

from __future__ import annotations

from typing import Any

import pydantic

from orchestrator.documents.history import RecordedRun, RecordedTarget
from orchestrator.documents.report import Report, TimedStep
from orchestrator.documents.tune import Tune
from orchestrator.errors import InputError
from orchestrator.report import tunepage
from orchestrator.report.page import Curve, Section, Table
from orchestrator.report.run import source_words


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
    speed = gate.get("speed")
    if isinstance(speed, dict):
        section.facts.append(("speed", f"{speed.get('verdict')}: {speed.get('reason') or ''}"))
        section.tables.append(_speed_table(speed))
    if gate.get("per_position_acceptance"):
        section.curves.append(
            Curve(f"{title}: per-position acceptance", gate["per_position_acceptance"], position1)
        )
    return section


def _speed_table(speed: dict[str, Any]) -> Table:
    """A row per speed level: its figures with their bounds, its verdict and why."""

    def figure(entry: Any, unit: str = "", digits: int = 1) -> str:
        if not isinstance(entry, dict) or entry.get("mean") is None:
            return ""
        shown = f"{entry['mean']:.{digits}f}{unit}"
        return f"{shown} ({_bounds(entry)})" if _bounds(entry) else shown

    levels = [lv for lv in speed.get("levels") or [] if isinstance(lv, dict)]
    return Table(
        ["streams", "verdict", "speedup", "total tok/s", "per stream tok/s", "requests", "why"],
        [
            [
                str(lv.get("concurrency")),
                str(lv.get("verdict")),
                figure(lv.get("speedup"), "x", 2),
                figure(lv.get("total_tokens_per_second")),
                figure(lv.get("per_stream_tokens_per_second")),
                str(lv.get("requests")),
                str(lv.get("reason") or ""),
            ]
            for lv in levels
        ],
    )


def recorded_tune(run: RecordedRun) -> Tune:
    """A tune's history row as its document; a row that does not read as one is an
    error naming the run and the field."""
    try:
        return Tune.model_validate(run.model_dump())
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the record"
        raise InputError(f"run {run.run_id}: the tune's record: {where}: {first['msg']}") from None


def sections(report: Report) -> list[Section]:
    """The report's content, renderer-neutral (a tune's: `tunepage`)."""
    run = report.run
    if run.command == "tune":
        return tunepage.sections(recorded_tune(run), run.user)
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
