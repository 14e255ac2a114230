"""`orch tune`'s body: one gated deploy of the playbook per drafting depth on one
container (each the deploy transaction, recorded in history as any deploy), then the
container is left on the best passing depth, or with `restore` on the release it
started from. A stop request ends the loop at once: every step is a transaction,
so the container is on a gated release whenever it stops. The tune itself is recorded
in the history too, under its own run id (`orch report` draws its chart)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.cancel import Cancel
from orchestrator.connections import Connect
from orchestrator.contract import run_result
from orchestrator.deadline import SYSTEM_CLOCK, Clock, now
from orchestrator.documents.runs import DeployRun, RollbackRun
from orchestrator.documents.tune import Ending, Tune
from orchestrator.errors import InputError, NeedsAttention
from orchestrator.fleet import runs
from orchestrator.fleet.inputs import Inputs, load
from orchestrator.fleet.skeleton import MISSING_RECORD_EXIT, new_options
from orchestrator.history import History
from orchestrator.progress import Progress
from orchestrator.transaction.options import Options
from orchestrator.transaction.outcome import Outcome
from orchestrator.tuning import (
    TUNED_FIELD,
    TunedLevel,
    TuneStep,
    best_per_level,
    chosen_value,
    playbook_line,
    set_line,
)


@dataclass(frozen=True)
class TuneAsk:
    """What `orch tune` was asked: the playbook on one container, the depths to try."""

    playbook: str
    inventory_path: Path
    container: str
    """As `--limit` named it: it must select one container."""
    assignments: list[str]
    values: list[int]
    restore: bool = False
    recheck: bool = False
    """Every deploy of the tune checks its launch again, kept verdict or not."""


def check(ask: TuneAsk) -> Inputs:
    """The first depth's inputs, loaded before anything connects: bad input (the
    playbook, a `--set`, the first depth) or a `--limit` that is not one container is
    an InputError with nothing touched."""
    inputs = _inputs(ask, ask.values[0])
    if len(inputs.plans) != 1:
        names = ", ".join(p.container for p in inputs.plans) or "none"
        raise InputError(
            f"--limit {ask.container}: tune measures one container, this selects {names}"
        )
    return inputs


def tune(
    ask: TuneAsk,
    connect: Connect,
    progress: Progress,
    cancel: Cancel,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[Tune, int]:
    """Every depth in turn, then the ending; each deploy checks its own inputs. A deploy
    ending in bad input or needing attention ends the tune there, on what it left.
    `restore` on a container that served nothing before ends as without it. `clock`
    times the gates' waits."""
    inputs = check(ask)
    own, started = _options(ask), now()
    container = inputs.plans[0].container
    steps: list[TuneStep] = []
    codes: list[int] = []
    started_on: str | None = None
    last: Outcome | None = None
    for value in ask.values:
        if cancel.requested:
            break
        deployed, code = runs.deploy(
            _inputs(ask, value), _options(ask), connect, progress, cancel, clock=clock
        )
        last = _target(deployed)
        if not steps:
            started_on = last.previous_release
        steps.append(step_of(value, deployed, last))
        codes.append(code)
        if code >= 2:
            break  # bad input or a container needing attention: no further depth is safe
    best = best_per_level(steps)
    chosen = chosen_value(best, steps)
    final_run_id: str | None = None
    ended: Ending
    if cancel.requested:
        ended = "interrupted"
    elif max(codes, default=0) >= 2:
        ended = "last"
    elif ask.restore and last is not None and last.current == started_on:
        ended = "restored"  # every depth failed and rolled back to it already
    elif ask.restore and started_on is not None:
        final, code = runs.rollback(
            _inputs(ask, ask.values[0]),
            _options(ask),
            started_on,
            connect,
            progress,
            cancel,
            clock=clock,
        )
        final_run_id, last = final.run_id, _target(final)
        codes.append(code)
        ended = "restored" if code == 0 else "last"
    elif chosen is None:
        ended = "none_passed"
    elif steps[-1].value == chosen:
        ended = "best"
    else:
        again, code = runs.deploy(
            _inputs(ask, chosen), _options(ask), connect, progress, cancel, clock=clock
        )
        final_run_id, last = again.run_id, _target(again)
        codes.append(code)
        ended = "best" if code == 0 else "last"
    code = tune_exit_code(codes, chosen, cancel)
    document = Tune(
        playbook=inputs.playbook.name,
        run_id=own.run_id,
        started=started,
        target=container,
        values=ask.values,
        result=run_result(code),
        steps=steps,
        best=best,
        chosen=chosen,
        apply_with=None if chosen is None else set_line(chosen),
        playbook_line=None if chosen is None else playbook_line(chosen),
        started_on=started_on,
        ended=ended,
        current=last.current if last else None,
        final_run_id=final_run_id,
    )
    try:
        History().record(document, "tune", own.user)
    except NeedsAttention as exc:
        document.warnings.append(f"{exc}: the tune is missing from the history")
        code = max(code, MISSING_RECORD_EXIT)
    return document, code


def tune_exit_code(codes: list[int], chosen: int | None, cancel: Cancel) -> int:
    """The signal's code when stopped; a deploy's 2 or worse (bad input, needs
    attention) as it was; else 0 when a depth passed and 1 when none did (each
    failing depth rolled itself back, as a failing deploy does)."""
    if cancel.requested:
        return cancel.exit_code
    worst = max(codes, default=0)
    if worst >= 2:
        return worst
    return 0 if chosen is not None and codes[-1] == 0 else 1


def step_of(value: int, document: DeployRun, target: Outcome) -> TuneStep:
    """One depth's figures from its deploy's gate."""
    gate = target.gate
    speed = gate.speed if gate else None
    levels = [
        TunedLevel(level.concurrency, level.total_tokens_per_second, level.speedup)
        for level in (speed.levels if speed else [])
    ]
    return TuneStep(
        value=value,
        run_id=document.run_id,
        result=target.result,
        release=target.release,
        verdict=gate.verdict.outcome if gate else None,
        mean_acceptance_length=gate.verdict.mean_acceptance_length if gate else None,
        levels=levels,
    )


def _inputs(ask: TuneAsk, value: int) -> Inputs:
    assignments = [*ask.assignments, f"{TUNED_FIELD}={value}"]
    return load(ask.playbook, ask.inventory_path, [ask.container], assignments, True)


def _options(ask: TuneAsk) -> Options:
    return new_options(inventory=str(ask.inventory_path), recheck=ask.recheck)


def _target(document: DeployRun | RollbackRun) -> Outcome:
    return document.targets[0]
