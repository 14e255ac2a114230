"""The report of a deploy, rollback or baseline run: each container's result, its gate
by context and endpoint, the acceptance by position, a baseline's speed levels, the
waves and the connections."""

from __future__ import annotations

import json

from rich.console import Console, Group, RenderableType
from rich.text import Text

from orchestrator.connections import ConnectionUsage
from orchestrator.documents.runs import DeployRun, RollbackRun, Run
from orchestrator.gate import SOURCES, GateReport, PhaseReport, speed_lines
from orchestrator.probes.sampling import describe
from orchestrator.report.screen import (
    Cell,
    Column,
    console,
    findings_table,
    fitted_table,
    mean_length,
    text,
    words,
)
from orchestrator.rollout import RolloutRun


def print_run(doc: Run, stderr: bool = False) -> None:
    """The final table of a deploy or rollback, with per-position acceptance bars (on
    stderr when stdout holds the result, a dry run's diff). Gates are shown from their
    JSON, the form `orch report` reads them in from the history too."""
    out = console(stderr=stderr)
    out.print(text(f"{doc.playbook} run {doc.run_id}: {words(doc.result)}"), highlight=False)
    columns = [
        Column("CONTAINER", identifier=True),
        Column("RESULT"),
        Column("RELEASE", identifier=True),
        Column("ATTEMPTED", identifier=True),
        Column("PREVIOUS", identifier=True, drop=3),
        Column("GATE", drop=2),
        Column("MEAN LENGTH", drop=1, justify="right"),
        Column("DRAFTS", drop=4, justify="right"),
    ]
    rows: list[list[Cell]] = []
    for target in doc.targets:
        verdict = target.gate.verdict if target.gate else None
        rows.append(
            [
                text(target.name),
                text(words(target.result)),
                text(target.current or ""),
                text(attempted(target.release, target.current, target.result) or ""),
                text(target.previous_release or ""),
                text(verdict.outcome if verdict else ""),
                mean_length(verdict.mean_acceptance_length if verdict else None),
                str(verdict.drafts or "") if verdict else "",
            ]
        )
    out.print(fitted_table(out, columns, rows), crop=False)
    if isinstance(doc, RollbackRun) and doc.to:
        to = doc.to
        state = f"the state run {to.run_id} left" if to.run_id else f"release {to.release}"
        out.print(text(f"--to {to.query}: back to {state}"), highlight=False)
    for target in doc.targets:
        for label, report in (("gate", target.gate), ("rollback gate", target.rollback_gate)):
            if report:
                for line in gate_lines(label, report):
                    out.print(text(target.name, "bold") + text(line), highlight=False)
                if report.sampling:
                    out.print(text(f"  probed at {describe(report.sampling)}"), highlight=False)
                if report.source:
                    figures = source_words(report.source, report.note)
                    out.print(text(f"  figures from {figures}"), highlight=False)
                if report.explanation:
                    out.print(text(f"  why: {report.explanation}"), highlight=False)
                out.print(acceptance_bars(list(report.verdict.per_position_acceptance)))
                if report.phases:
                    out.print(context_table(out, report.phases), crop=False)
                if report.advice:
                    out.print(f"  advice: {report.advice.text}", highlight=False)
                for line in speed_lines(report.speed):
                    out.print(text(f"  {line}"), highlight=False)
        if target.speed:
            out.print(text(target.name, "bold") + text(" baseline:"), highlight=False)
            for line in speed_lines(target.speed):
                out.print(text(f"  {line}"), highlight=False)
        if target.findings:
            out.print(
                findings_table(out, target.findings, title=text(f"{target.name}: findings")),
                crop=False,
            )
        for note in target.notes:
            out.print(f"{target.name}: {note}", markup=False, highlight=False)
        if target.error:
            out.print(text(f"{target.name}: {target.error}", "red"), highlight=False)
        if target.diff == "":
            out.print(text(f"{target.name}: no file differs from the current release"))
    rollout = None if isinstance(doc, RollbackRun) else doc.rollout
    connections = doc.connections if isinstance(doc, DeployRun) else []
    for line in [*wave_lines(rollout), *queue_lines(connections)]:
        out.print(line, highlight=False)
    for warning in doc.warnings:
        out.print(text(f"warning: {warning}", "yellow"), highlight=False)
    if doc.log:
        out.print(text(f"run log: {doc.log} (orch history --show {doc.run_id})"))


def attempted(tried: str | None, ended_on: str | None, result: str) -> str | None:
    """The release the run tried, where the container is not on it (rolled back,
    interrupted, failed); empty where it is: every table's ATTEMPTED, beside RELEASE,
    the release the container ended on."""
    return tried if tried != ended_on and result != "dry_run" else None


def source_words(source: str, note: str | None) -> str:
    """Where a gate's figures came from, and why when not where the playbook asked."""
    words = SOURCES.get(source, source)
    return f"{words} ({note})" if note else words


def gate_lines(label: str, gate: GateReport) -> list[str]:
    """` gate: pass` (or `fail`), then one line per phase with its figures against the
    requirement; a reason no phase gives (no speculative decoding at all) leads."""
    verdict = gate.verdict
    if not gate.phases:
        return [f" {label}: {verdict.reason}"]
    said = any(p.verdict.reason and p.verdict.reason in verdict.reason for p in gate.phases)
    head = verdict.outcome if verdict.outcome == "pass" or said else verdict.reason
    return [f" {label}: {head}"] + [
        f"   {p.bucket.name} context via {p.endpoint.path}: "
        + (p.verdict.reason or p.verdict.outcome)
        for p in gate.phases
    ]


def wave_lines(rollout: RolloutRun | None) -> list[str]:
    """`wave 2 of 5: 16 containers, deployed 15, rolled_back 1, 41.2 s` per wave."""
    if not rollout:
        return []
    waves = rollout.waves
    lines = []
    for wave in waves:
        results = ", ".join(f"{name} {count}" for name, count in sorted(wave.results.items()))
        kind = "canary" if wave.kind == "canary" else "wave"
        pause = f", then paused {wave.paused:g} s" if wave.paused else ""
        lines.append(
            f"{kind} {wave.number} of {len(waves)}: {len(wave.names)} container(s), "
            f"{results}, {wave.seconds:.1f} s{pause}"
        )
    return lines


def queue_lines(connections: list[ConnectionUsage]) -> list[str]:
    """Hosts where more commands were due at once than their connections' sessions allow."""
    return [
        f"{c.endpoint}: {c.waited} command(s) queued for a session on its "
        f"{'one SSH connection' if c.connections == 1 else f'{c.connections} SSH connections'}"
        f" (max_sessions {c.max_sessions}, peak {c.peak_sessions}, "
        f"{c.refused} open(s) refused by sshd and tried again)"
        for c in connections
        if c.waited
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


def context_table(out: Console, phases: list[PhaseReport]) -> RenderableType:
    """One row per gate phase: which context, endpoint and template settings each figure
    came from."""
    rows: list[list[Cell]] = []
    for phase in phases:
        bucket, verdict = phase.bucket, phase.verdict
        upper = bucket.max_tokens
        settings = phase.endpoint.settings()
        rows.append(
            [
                bucket.name,
                f"{bucket.min_tokens}..{'' if upper is None else upper}",
                phase.endpoint.path,
                "" if settings is None else json.dumps(settings),
                verdict.outcome,
                mean_length(verdict.mean_acceptance_length),
                str(verdict.drafts),
            ]
        )
    return Group(Text("by context"), fitted_table(out, CONTEXT_COLUMNS, rows))


def acceptance_bars(rates: list[float], width: int = 40) -> str:
    """`pos  1 ████████░░ 0.80` per position: where the drafts stop being accepted."""
    return "\n".join(
        f"  pos {i:2d} {'█' * round(rate * width)}{'░' * (width - round(rate * width))} {rate:.3f}"
        for i, rate in enumerate(rates, 1)
    )
