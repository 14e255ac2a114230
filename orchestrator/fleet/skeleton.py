"""The run skeleton, written once for every run that changes containers (deploy, its
dry run, rollback, the server actions): the run's log opened, the connections,
the run's own work on every container, the document, its log closed and the run
recorded in the local history."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from orchestrator import runlog
from orchestrator.cancel import Cancel
from orchestrator.connections import Connect, Pool
from orchestrator.container.journal import UNKNOWN_RUN
from orchestrator.contract import run_result
from orchestrator.deadline import now
from orchestrator.documents.runs import (
    InterruptedRun,
    InterruptedTarget,
    Run,
)
from orchestrator.errors import NeedsAttention
from orchestrator.fleet.inputs import Inputs
from orchestrator.history import History, check_writable, new_run_id
from orchestrator.progress import Progress
from orchestrator.transaction.options import Options
from orchestrator.transaction.outcome import Outcome

D = TypeVar("D", bound=Run)


@dataclass(frozen=True)
class Acted(Generic[D]):
    """What a run's work did: each container's outcome, and its document's own fields
    bound (`document(**run fields)` makes the document)."""

    outcomes: list[Outcome]
    document: Callable[..., D]


def run(
    command: str,
    inputs: Inputs,
    options: Options,
    connect: Connect,
    progress: Progress,
    cancel: Cancel,
    act: Callable[[Pool, Progress], Acted[D]],
) -> tuple[D, int]:
    """`act` on the run's connections, with its progress recorded in the run's log;
    then the document, the log's end and the history's row (none for a dry run,
    which changes nothing and is not recorded)."""
    recorded = not options.dry_run
    if recorded:
        check_writable()
    started = now()
    log = _open_log(command, inputs, options)
    with connect(inputs.inventory, log) as connections:
        acted = act(connections, log.recording(progress))
    code = exit_code(acted.outcomes, cancel)
    document = acted.document(**_run_fields(inputs, options.run_id, started, acted.outcomes, code))
    _close_log(log, document, code)
    if recorded and not _remember(document, command, options.user, log.path):
        code = max(code, MISSING_RECORD_EXIT)
    return document, code


def exit_code(outcomes: list[Outcome], cancel: Cancel) -> int:
    """The worst of the containers' exit codes; an interrupt's own when there was one."""
    return cancel.exit_code if cancel.requested else max((o.exit_code for o in outcomes), default=0)


def _run_fields(
    inputs: Inputs, run_id: str, started: str, outcomes: list[Outcome], code: int
) -> dict[str, Any]:
    """What every run's document says of the run and its inputs: RunDocument's own
    fields, by name (the document checks them as it is made)."""
    drafter = inputs.playbook.drafter
    return {
        "playbook": inputs.playbook.name,
        "run_id": run_id,
        "started": started,
        "method": drafter.kind,
        "drafter": drafter.profile or drafter.weights,
        "model": inputs.playbook.target.served_name,
        "inventory": str(inputs.inventory_path.resolve()),
        "assignments": list(inputs.playbook.assignments),
        "result": run_result(code),
        "targets": outcomes,
    }


RECORD_ATTEMPTS = 3
RECORD_RETRY_SECONDS = 1.0
MISSING_RECORD_EXIT = 3
"""A run that changed the fleet but is missing from the history needs attention."""


def _remember(document: Run, command: str, user: str, log: Path) -> bool:
    """The run's history row, tried RECORD_ATTEMPTS times (a full disk may clear); False
    once it could not be written, the document then saying so and where its log is. A
    run this one recovered (it died in its switch, before its own row) is recorded too,
    as the containers' records show it: interrupted, and where its recovery left each."""
    failure = ""
    for attempt in range(RECORD_ATTEMPTS):
        if attempt:
            time.sleep(RECORD_RETRY_SECONDS)
        try:
            History().record(document, command, user)
            for interrupted in _recovered_runs(document):
                History().record_if_missing(interrupted, "deploy", user)
            return True
        except NeedsAttention as exc:
            failure = str(exc)
    document.warnings.append(
        f"{failure} (tried {RECORD_ATTEMPTS} times): the run is missing from the history; "
        f"its log is {log}"
    )
    return False


def _recovered_runs(document: Run) -> list[InterruptedRun]:
    runs: dict[str, InterruptedRun] = {}
    for target in document.targets:
        recovered = target.recovered
        if not recovered or recovered.run_id == UNKNOWN_RUN:
            continue  # none, or a run the container could not name (unreadable journal)
        run = runs.setdefault(
            recovered.run_id,
            InterruptedRun(
                playbook=document.playbook,
                run_id=recovered.run_id,
                started=recovered.started,
                recovered_by=document.run_id,
                targets=[],
            ),
        )
        run.targets.append(
            InterruptedTarget(
                name=target.name,
                step=recovered.step,
                release=recovered.to_release,
                current=recovered.back_on,
            )
        )
    return list(runs.values())


def _open_log(command: str, inputs: Inputs, options: Options) -> runlog.RunLog:
    """The run's local log, started with what runs where (the oldest logs beyond
    runlog.KEPT make room for it)."""
    runlog.prune()
    log = runlog.RunLog(options.run_id)
    mode = " (dry run)" if options.dry_run else ""
    targets = ", ".join(f"{p.container} on {p.host}" for p in inputs.plans)
    log.note("", f"{command}{mode} {inputs.playbook.name} by {options.user}: {targets}")
    return log


def _close_log(log: runlog.RunLog, document: Run, code: int) -> None:
    """Each container's outcome and the run's result end the log; the document says
    where it is (and, if it could not be written, why)."""
    for target in document.targets:
        gate = target.gate
        judged = f", gate {gate.verdict.outcome}: {gate.verdict.reason}" if gate else ""
        error = f": {target.error}" if target.error else ""
        log.note(target.name, f"result {target.result}{judged}{error}")
    log.note("", f"result {document.result} (exit {code})")
    document.log = None if log.warning else str(log.path)  # never a path it did not write
    if log.warning:
        document.warnings.append(log.warning)


def new_options(**kwargs: Any) -> Options:
    return Options(run_id=new_run_id(), **kwargs)
