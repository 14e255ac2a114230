"""The decision after a gate, apart from the I/O that follows it: keep the release
or go back, which links to point, what to prune, and the result, exit code and error
the container's outcome then records. Pure: typed facts in, a typed decision out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orchestrator.container.pause import Decision
from orchestrator.gate import GateReport
from orchestrator.metrics.assess import VerdictOutcome

OnInconclusive = Literal["rollback", "keep", "pause"]
Switching = Literal["deploy", "rollback"]


@dataclass(frozen=True)
class Judged:
    """What a gate said of a release, as the decision reads it."""

    verdict: VerdictOutcome
    served: bool
    """Drafts were measured and not every probe request failed: a server that answered."""
    reason: str = ""
    gated: bool = True
    """A gate ran (False: the switch failed before one could)."""
    promoted: bool = False
    """An inconclusive gate paused, then promoted by a person's decision."""

    @classmethod
    def of(cls, report: GateReport, promoted: bool = False) -> Judged:
        served = report.verdict.drafts > 0 and report.request_errors < report.requests
        return cls(
            report.verdict.outcome, served, report.verdict.reason, bool(report.phases), promoted
        )


def admits(gate: Judged, on_inconclusive: OnInconclusive) -> bool:
    """Pass; or inconclusive with `on_inconclusive: keep` or promoted from a pause, but
    only for a server that was measured and answered (a dead one is never kept)."""
    return gate.verdict == "pass" or (
        gate.verdict == "inconclusive"
        and (on_inconclusive == "keep" or gate.promoted)
        and gate.served
    )


def pauses(gate: Judged, on_inconclusive: OnInconclusive, cancelled: bool) -> bool:
    """A deploy's gate waits for a decision: inconclusive under `pause`, its server
    measured and answering (a dead one is rolled back at once), and no stop request."""
    return (
        on_inconclusive == "pause"
        and gate.verdict == "inconclusive"
        and gate.served
        and not cancelled
    )


@dataclass(frozen=True)
class PausePoll:
    """What a paused run found at one poll."""

    run_id: str
    found: Decision | str | None
    """The decision file: a decision, what is wrong with it, or None (none yet)."""
    waited: float
    timeout: float
    cancelled: bool
    lost: str | None
    """Why the lock is no longer this run's (None: still its)."""
    at: str
    """Now, as records write it."""


def pause_ends(poll: PausePoll) -> Decision | None:
    """How the pause ends at this poll (None: it goes on). A stop request or a lost
    lock ends it as an abort, at once; then a decision for this run; then, with none
    within the pause timeout, an abort by orch, saying so. A decision for another run
    (left by an earlier pause) is not this run's to act on."""
    p = poll

    def abort(why: str) -> Decision:
        return Decision(p.run_id, "abort", f"orch ({why})", p.at)

    if p.cancelled:
        return abort("a stop request ended the pause")
    if p.lost:
        return abort(p.lost)
    if isinstance(p.found, Decision) and p.found.run_id == p.run_id:
        return p.found
    if p.waited >= p.timeout:
        return abort(f"no decision within the pause timeout of {p.timeout:g} s")
    return None


def keeps(gate: Judged, on_inconclusive: OnInconclusive, cancelled: bool) -> bool:
    """A release a switch made current stays: a pass always; an admitted inconclusive
    unless a stop request cut the gate short (then it was not measured to the end)."""
    return gate.verdict == "pass" or (admits(gate, on_inconclusive) and not cancelled)


@dataclass(frozen=True)
class Switched:
    """A deploy's or rollback's switch to `new`, judged by its gate."""

    action: Switching
    new: str
    previous: str | None
    """The release `current` named before the switch."""
    gate: Judged
    on_inconclusive: OnInconclusive
    cancelled: bool = False
    earlier: str | None = None
    """The `previous` link, read when `previous` is `new` (a redeploy of the current
    release): the way back then goes one further."""
    replacing: bool = False
    """`deploy --replace` stopped another playbook's running server for this switch."""
    was_serving: bool = True
    """This deployment's own server ran before the switch."""


@dataclass(frozen=True)
class Keep:
    """`new` stays current."""

    result: Literal["deployed", "rolled_back"]
    record_previous: str | None
    """The release the `previous` link is pointed at (None: left as it is)."""
    prune_keeping: frozenset[str] | None
    """Old releases are pruned, these kept (None: no pruning, a rollback's)."""
    replaced_stays_stopped: bool


@dataclass(frozen=True)
class GoBack:
    """`new` did not stay: back to `to`, or with `to` None its server stopped and
    `current` pointed at `stopped_on` again (None: removed, as before the first deploy)."""

    to: str | None
    prune_keeping: frozenset[str] | None
    restore_replaced: bool
    stopped_on: str | None = None


@dataclass(frozen=True)
class WayBack:
    """What the journal records as the way back from a switch: the release started
    and gated again (`to`), or, with `to` None, the release `current` names again with
    its server stopped (`stopped_on`; None: `current` removed)."""

    to: str | None
    stopped_on: str | None


def way_back(previous: str | None, replacing: bool, was_serving: bool) -> WayBack:
    """Replacing another server while this deployment's own did not run, what ran
    before was that one: nothing of ours is started again, but the release this
    deployment was on stays its `current` (stopped, as before the run)."""
    if replacing and not was_serving:
        return WayBack(None, previous)
    return WayBack(previous, None)


def after_gate(switched: Switched) -> Keep | GoBack:
    s = switched
    prunes = s.action == "deploy"
    if keeps(s.gate, s.on_inconclusive, s.cancelled):
        return Keep(
            "deployed" if prunes else "rolled_back",
            s.previous if s.previous and s.previous != s.new else None,
            frozenset({s.new, s.previous or ""}) if prunes else None,
            s.replacing,
        )
    back = way_back(s.previous, s.replacing, s.was_serving)
    previous = s.earlier if s.previous == s.new else s.previous
    to = previous if previous != s.new and (back.to or not s.replacing) else None
    # releases of failed and interrupted runs count too: they never pile up
    kept = frozenset({s.new, to or back.stopped_on or ""}) if prunes else None
    return GoBack(to, kept, s.replacing, None if to else back.stopped_on)


@dataclass(frozen=True)
class WentBack:
    """How the way back after a switch that did not stay went."""

    action: Switching
    gate: Judged
    """The gate of the release that did not stay."""
    to: str | None
    back_gate: Judged | None
    """The gate of the release gone back to (None: nothing to go back to)."""
    on_inconclusive: OnInconclusive
    replaced: tuple[str, Literal["restored", "failed"], str | None] | None = None
    """With --replace: the other playbook, whether it was restored, and why not."""
    cancelled: bool = False
    cancel_exit_code: int = 0
    stopped_on: str | None = None
    """With `to` None: the release `current` names again, its server stopped."""


@dataclass(frozen=True)
class Settled:
    """The result, exit code and error the container's outcome records."""

    result: Literal["rolled_back", "failed", "interrupted"]
    exit_code: int
    error: str


def settled(went: WentBack) -> Settled:
    """After going back: rolled back if the way back passed (or the replaced server was
    restored), failed (exit 3: needs attention) if the way back failed too."""
    w = went
    code, error = 1, f"gate {w.gate.verdict}: {w.gate.reason}"
    result: Literal["rolled_back", "failed", "interrupted"] = (
        "rolled_back" if w.action == "deploy" and w.back_gate else "failed"
    )
    stayed = f"back on {w.stopped_on} (stopped, as before this run)" if w.stopped_on else ""
    error += f"; {stayed}" if stayed else ""
    if w.replaced:
        playbook, restored, why = w.replaced
        if restored == "restored":
            result = "rolled_back"
            error += f"; {playbook} restored"
        else:
            code, error = 3, f"{error}; RESTORE of {playbook} failed: {why}"
    if w.back_gate and not admits(w.back_gate, w.on_inconclusive):
        result, code = "failed", 3
        error += (
            f"; ROLLBACK to {w.to} did not pass either: {w.back_gate.reason}"
            if w.back_gate.gated
            else f"; ROLLBACK to {w.to} failed: {w.back_gate.reason}"
        )
    if w.cancelled:
        result, code = "interrupted", max(code, w.cancel_exit_code)
        other = (
            f"{w.replaced[0]} {'restored' if w.replaced[1] == 'restored' else 'NOT restored'}"
            if w.replaced
            else ""
        )
        error = "interrupted before its gate passed; " + (
            f"back on {w.to}"
            if w.to
            else "; ".join(filter(None, [stayed, other]))
            or "its server stopped (nothing to go back to)"
        )
    return Settled(result, code, error)
