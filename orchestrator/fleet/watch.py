"""`orch watch`: acceptance on live traffic after the gate.

Each round scrapes every container's /metrics (the gate's `scrape`); a container's
scrapes within the last `window` seconds give, from the first to the last, the
counter deltas (`metrics.evaluate.measure`): mean acceptance length, position-1
acceptance and drafts per second, judged against the playbook's gate thresholds as
a point estimate with at least `min_drafts` drafts (as `orch alerts` does). A
counter that went down is a restart: that container's window starts again. A
container `below` in consecutive rounds keeps the time it first was (`below_since`).
A container whose scrape fails with no release current has nothing deployed, as
`orch status` says it (exit 0), not a server that cannot be reached.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from orchestrator.connections import SSH, Connect
from orchestrator.container.journal import Journal, Transaction
from orchestrator.container.pause import PAUSED, Choice
from orchestrator.container.store import linked
from orchestrator.contract import run_result
from orchestrator.deadline import SYSTEM_CLOCK, Clock, Deadline
from orchestrator.documents.watch import Acceptance, PausedRun, Thresholds, Watch, WatchEntry
from orchestrator.errors import NeedsAttention, OrchError
from orchestrator.fanout import READ_PARALLEL, fan_out
from orchestrator.fleet.inputs import Inputs
from orchestrator.fleet.status import decide
from orchestrator.gate import SCRAPE_SECONDS, ScrapeFailed, scrape
from orchestrator.metrics.evaluate import Measurement, is_reset, measure
from orchestrator.metrics.scrape import MetricsFormatError, SpecDecodeCounters
from orchestrator.plan import TargetPlan
from orchestrator.playbook import Gate
from orchestrator.transport.base import Transport

EXIT_CODES: dict[str, int] = {"below": 1, "unreachable": 3}
"""A watch's exit code is the worst of its containers' (others: 0)."""


@dataclass(frozen=True)
class Sample:
    at: float
    counters: SpecDecodeCounters


@dataclass
class Window:
    """One container's scrapes over the last `seconds` (the oldest kept one at or before
    the window's start, so the deltas span the whole window once it is full)."""

    seconds: float
    samples: deque[Sample] = field(default_factory=deque)
    restarts: int = 0

    def add(self, sample: Sample) -> None:
        if self.samples and is_reset(self.samples[-1].counters, sample.counters):
            self.samples.clear()
            self.restarts += 1
        self.samples.append(sample)
        start = sample.at - self.seconds
        while len(self.samples) > 2 and self.samples[1].at <= start:
            self.samples.popleft()

    def measurement(self) -> tuple[Measurement, float] | None:
        """The drafts between the window's first and last scrape, and the seconds between
        them; None before two scrapes."""
        if len(self.samples) < 2:
            return None
        first, last = self.samples[0], self.samples[-1]
        return measure(first.counters, last.counters), last.at - first.at


@dataclass(frozen=True)
class Judgement:
    state: Acceptance
    reason: str


def judge(measured: Measurement, gate: Gate) -> Judgement:
    """The window against the gate's minimums, once it holds `min_drafts` drafts."""
    if measured.drafts < gate.min_drafts:
        return Judgement(
            "too_few_drafts", f"{measured.drafts} of {gate.min_drafts} drafts in the window"
        )
    mean = measured.mean_acceptance_length or 1.0
    first = (measured.per_position_acceptance or (0.0,))[0]
    misses = []
    if mean < gate.min_mean_acceptance_length:
        misses.append(f"mean acceptance length {mean:.2f} < {gate.min_mean_acceptance_length:.2f}")
    if gate.min_position1_acceptance is not None and first < gate.min_position1_acceptance:
        misses.append(f"position-1 acceptance {first:.2f} < {gate.min_position1_acceptance:.2f}")
    if misses:
        return Judgement("below", "; ".join(misses) + f" over {measured.drafts} drafts")
    return Judgement("ok", f"mean acceptance length {mean:.2f} over {measured.drafts} drafts")


@dataclass
class Watched:
    """What the watch knows of one container between rounds."""

    plan: TargetPlan
    window: Window
    state: Acceptance = "too_few_drafts"
    reason: str = "no scrape yet"
    measured: Measurement | None = None
    span: float = 0.0
    below_since: str | None = None
    paused: PausedRun | None = None
    """A run's gate paused here, as this round read its journal."""

    def observe(self, counters: SpecDecodeCounters | None, at: float, gate: Gate) -> None:
        if counters is None:
            self._set("not_drafting", "/metrics has no vllm:spec_decode_* series")
            return
        self.window.add(Sample(at, counters))
        try:
            found = self.window.measurement()
        except MetricsFormatError as exc:  # a torn scrape: start again from this one
            self.window.samples = deque([Sample(at, counters)])
            found, self.reason = None, f"could not read the counters: {exc}"
        if found is None:
            self.measured, self.span = None, 0.0
            self._set("too_few_drafts", "one scrape in the window so far")
            return
        self.measured, self.span = found
        verdict = judge(self.measured, gate)
        self._set(verdict.state, verdict.reason)

    def unreached(self, why: str) -> None:
        self._set("unreachable", why)

    def nothing_deployed(self) -> None:
        self.window.samples.clear()
        self.measured, self.span = None, 0.0
        self._set("nothing_deployed", "nothing deployed here yet: no server to watch")

    def _set(self, state: Acceptance, reason: str) -> None:
        if state == "below" and self.state != "below":
            self.below_since = datetime.now(UTC).isoformat(timespec="seconds")
        elif state != "below":
            self.below_since = None
        self.state, self.reason = state, reason

    def entry(self) -> WatchEntry:
        """The container as this round's document lists it."""
        measured = self.measured
        curve = list(measured.per_position_acceptance or ()) if measured else []
        drafts = measured.drafts if measured else 0
        return WatchEntry(
            name=self.plan.container,
            host=self.plan.host,
            acceptance=self.state,
            mean_acceptance_length=measured.mean_acceptance_length if measured else None,
            position1_acceptance=curve[0] if curve else None,
            per_position_acceptance=curve,
            drafts=drafts,
            drafts_per_second=round(drafts / self.span, 3) if self.span else None,
            window_seconds=self.span,
            below_since=self.below_since,
            counter_resets=self.window.restarts,
            reason=self.reason,
            paused=self.paused,
        )


def paused_run(transport: Transport, plan: TargetPlan) -> Transaction | None:
    """The transaction of a run whose gate is paused here (None: none, or the journal
    cannot be read just now: the scrape says what matters then)."""
    try:
        found = Journal(transport, plan.layout).read()
    except OrchError:
        return None
    return found if isinstance(found, Transaction) and found.step == PAUSED else None


def nothing_deployed(transport: Transport, plan: TargetPlan) -> bool:
    """Whether no release is current on the container (False when that cannot be read:
    the scrape's failure is what to say then)."""
    try:
        return linked(transport, plan.layout.current) is None
    except OrchError:
        return False


class Watcher:
    """Rounds of scrapes over a fleet, each turned into one `Watch` document."""

    def __init__(
        self,
        playbook: str,
        plans: Sequence[TargetPlan],
        transport_of: Callable[[str], Transport],
        gate: Gate,
        window_seconds: float,
        clock: Clock = SYSTEM_CLOCK,
        decide: Callable[[str], dict[Choice, str]] = lambda _: {},
    ) -> None:
        self.clock, self.decide = clock, decide
        self.playbook, self.gate, self.transport_of = playbook, gate, transport_of
        self.window_seconds = window_seconds
        self.watched = {p.container: Watched(p, Window(window_seconds)) for p in plans}

    def round(self) -> Watch:
        """Scrape every container once (side by side) and judge its window."""

        def one(name: str) -> tuple[SpecDecodeCounters | None, float] | None:
            """The counters and when read; None: nothing deployed there."""
            plan = self.watched[name].plan
            transport = self.transport_of(name)
            try:
                deadline = Deadline.after(SCRAPE_SECONDS, clock=self.clock)
                counters = scrape(transport, plan.address, plan.port, deadline)
            except ScrapeFailed as exc:
                if nothing_deployed(transport, plan):
                    return None
                raise NeedsAttention(f"could not read /metrics: {exc}") from None
            return counters, self.clock.now()

        def paused(name: str) -> PausedRun | None:
            found = paused_run(self.transport_of(name), self.watched[name].plan)
            if found is None:
                return None
            return PausedRun(
                run_id=found.run_id,
                release=found.to_release,
                since=found.updated,
                decide=self.decide(name),
            )

        group = fan_out(list(self.watched), one, READ_PARALLEL)
        pauses = fan_out(list(self.watched), paused, READ_PARALLEL).succeeded
        for name, watched in self.watched.items():
            watched.paused = pauses.get(name)
            if name in group.failed:
                watched.unreached(group.failed[name].message_for(name))
            elif (read := group.succeeded[name]) is None:
                watched.nothing_deployed()
            else:
                watched.observe(*read, self.gate)
        return self.document()

    def exit_code(self) -> int:
        return max((EXIT_CODES.get(w.state, 0) for w in self.watched.values()), default=0)

    def document(self) -> Watch:
        gate = self.gate
        return Watch(
            playbook=self.playbook,
            result=run_result(self.exit_code()),
            time=datetime.now(UTC).isoformat(timespec="seconds"),
            window_seconds=self.window_seconds,
            thresholds=Thresholds(
                min_mean_acceptance_length=gate.min_mean_acceptance_length,
                min_position1_acceptance=gate.min_position1_acceptance,
                min_drafts=gate.min_drafts,
            ),
            targets=[w.entry() for w in self.watched.values()],
        )


def watch(
    watcher: Watcher,
    interval: float,
    once: bool,
    emit: Callable[[Watch], None],
    stop: Callable[[float], bool],
) -> int:
    """Scrape every `interval` seconds. With `once`: for one window, then emit its one
    document; else emit each round's until `stop(seconds)` (a wait that returns True
    when asked to stop). Returns the exit code of the last round."""
    started = watcher.clock.now()
    while True:
        last = watcher.round()
        if once:
            if watcher.clock.now() - started >= watcher.window_seconds:
                emit(last)
                return watcher.exit_code()
        else:
            emit(last)
        if stop(interval):
            return watcher.exit_code()


MARKS = {
    "ok": "ok",
    "below": "BELOW",
    "too_few_drafts": "few drafts",
    "not_drafting": "NOT DRAFTING",
    "nothing_deployed": "nothing deployed",
    "unreachable": "UNREACHABLE",
}


def lines(doc: Watch) -> list[str]:
    """One line per container of a `Watch` document, the mark first after its name."""
    limits = doc.thresholds
    position1_min = limits.min_position1_acceptance
    width = max((len(t.name) for t in doc.targets), default=0)
    out = []
    for target in doc.targets:
        mark = MARKS[target.acceptance]
        if target.below_since:
            mark += f" since {target.below_since[11:19]}"
        figures = []
        if target.mean_acceptance_length is not None:
            figures.append(
                f"mean length {target.mean_acceptance_length:.2f}"
                f" (min {limits.min_mean_acceptance_length:.2f})"
            )
        if target.position1_acceptance is not None:
            bound = f" (min {position1_min:.2f})" if position1_min is not None else ""
            figures.append(f"position-1 {target.position1_acceptance:.2f}{bound}")
        if target.drafts_per_second is not None:
            figures.append(
                f"{target.drafts_per_second:.1f} drafts/s over {target.window_seconds:.0f} s"
            )
        if target.acceptance != "ok":
            figures.append(target.reason)
        if run := target.paused:
            decide = "; ".join(f"{choice}: {command}" for choice, command in run.decide.items())
            figures.append(f"PAUSED: run {run.run_id} since {run.since}, {decide}")
        out.append(f"{target.name:<{width}}  {mark:<12}  " + "  ".join(figures))
    return out


def watch_fleet(
    inputs: Inputs,
    interval: float,
    window: float,
    once: bool,
    emit: Callable[[Watch], None],
    stop: Callable[[float], bool],
    connect: Connect = SSH,
    clock: Clock = SYSTEM_CLOCK,
) -> int:
    """`orch watch`: the selected containers watched over `window` seconds, a round
    every `interval` (see `watch`)."""
    with connect(inputs.inventory, None) as connections:
        book = inputs.playbook
        watcher = Watcher(
            book.name,
            inputs.plans,
            connections.container,
            book.gate,
            window,
            clock,
            lambda name: decide(inputs, name),
        )
        return watch(watcher, interval, once, emit, stop)
