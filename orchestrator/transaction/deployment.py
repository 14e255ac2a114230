"""One playbook's deployment on one container, as a run works on it: the facade every
room of the transaction takes instead of ten arguments. It bundles the container's
transport, the plan and its layout, the playbook, the gate's context buckets, the
nvidia-smi path, the run's options, progress and stop request; it builds the
deployment's server, lock and journal once; it holds the container's outcome; and it
names the other playbooks' deployments on the same container (`neighbours`)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from orchestrator import gate
from orchestrator.baseline import ReferenceChoice, ReferenceFacts, choose_reference
from orchestrator.cancel import Cancel
from orchestrator.container import audit, store
from orchestrator.container.journal import Journal
from orchestrator.container.lock import DeployLock, Owner
from orchestrator.container.server import Server
from orchestrator.contract import jsonable
from orchestrator.deadline import SYSTEM_CLOCK, Clock
from orchestrator.errors import NeedsAttention, OrchError
from orchestrator.gate import GateReport
from orchestrator.gate.probe import Target
from orchestrator.gate.report import SpeedReport, Tick
from orchestrator.layout import LAUNCH_SCRIPT, Layout
from orchestrator.metrics.assess import FailureCauses
from orchestrator.metrics.speedup import SpeedReference
from orchestrator.plan import TargetPlan
from orchestrator.playbook import Gate, Playbook
from orchestrator.probes.context import ContextBucket
from orchestrator.progress import Progress, no_progress
from orchestrator.release import GateTarget
from orchestrator.secrets import ProbeKey, probe_key
from orchestrator.transaction import releases
from orchestrator.transaction.decision import Judged, admits
from orchestrator.transaction.options import Options
from orchestrator.transaction.outcome import Outcome
from orchestrator.transport.base import Transport

GateRunner = Callable[
    [
        Transport,
        str,
        int,
        str,
        Gate,
        Sequence[ContextBucket],
        FailureCauses,
        threading.Event | None,
        ProbeKey | None,
        Tick,
        Clock,
        SpeedReference | None,
    ],
    GateReport,
]
"""orchestrator.gate.run_gate's signature: a test gives a scripted gate."""

SpeedMeasurer = Callable[
    [Target, Gate, Sequence[ContextBucket], threading.Event | None, Tick, Clock], SpeedReport
]
"""orchestrator.gate.measure_levels's signature (a baseline's speed): a test gives its own."""


def _no_neighbours(_: str) -> Deployment | None:
    return None


@dataclass
class Deployment:
    """One container's share of a run: what every room of the transaction reads and acts
    through. `run_gate` is the gate; a test gives a scripted one."""

    plan: TargetPlan
    transport: Transport
    playbook: Playbook
    buckets: list[ContextBucket]
    nvidia_smi: str
    options: Options
    progress: Progress = no_progress
    cancel: Cancel = field(default_factory=Cancel)
    neighbours: Callable[[str], Deployment | None] = _no_neighbours
    """Another playbook's deployment (a name or file) on the same container, None when
    that playbook has no plan here: the one `--replace` stops, or a recovery restores."""
    run_gate: GateRunner = gate.run_gate
    measure: SpeedMeasurer = gate.measure_levels
    clock: Clock = SYSTEM_CLOCK
    """What every wait of the transaction reads and sleeps on (a test gives a fake one)."""

    def __post_init__(self) -> None:
        self.layout: Layout = self.plan.layout
        self.owner = Owner.me(self.options.run_id, self.options.user)
        self.lock = DeployLock(self.transport, self.layout, self.owner, self.playbook.lock_lease)
        self.journal = Journal(self.transport, self.layout)
        self.outcome = Outcome(self.plan.container, self.plan.host, release=self.plan.release_id)
        self.reference_facts: ReferenceFacts | None = None
        """What the speed reference is chosen from (transaction/reference.py reads it);
        None: not read, every gate's speed is recorded, not judged."""
        self.going_back = False
        """On the way back (`way_back`): the journal is written as far as it can be."""
        self.journal_lost: str | None = None
        """Why the journal could not be written on the way back, once said."""

    @property
    def name(self) -> str:
        return self.plan.container

    def serve(self, plan: TargetPlan) -> None:
        """Deploy `plan` instead (preflight.gather_for_server: the same playbook launched
        without per-request figures): the same deployment dir, another release."""
        if plan is not self.plan:
            self.plan = plan
            self.outcome.release = plan.release_id

    def server(self, port: int | None = None) -> Server:
        """This deployment's server, as its plan serves it (on `port`: as an earlier
        release recorded it)."""
        return Server(self.transport, self.layout, self.plan.address, port or self.plan.port)

    def stop_server(self) -> None:
        """Stopped by its recorded PID, within the playbook's stop timeout."""
        self.server().stop(self.playbook.server.stop_timeout)

    # -- the gate ------------------------------------------------------------------------
    def gate_target(self, release_id: str) -> GateTarget:
        """The new release is gated as the playbook says; an earlier one as its manifest
        recorded (a release made before manifests recorded it: as the playbook says)."""
        wanted = GateTarget.of(self.playbook)
        if release_id == self.plan.release_id:
            return wanted
        return releases.gate_target(self.transport, self.layout, release_id, wanted)

    def probe_key(self, release_id: str) -> ProbeKey | None:
        """The key the release's server requires: the new release's from the plan, an
        earlier one's from its own files on the target."""
        if release_id == self.plan.release_id:
            return probe_key(self.plan.files[LAUNCH_SCRIPT], self.plan.secrets_file)
        return releases.release_key(self.transport, self.layout.release(release_id))

    def reference(self, release_id: str) -> ReferenceChoice | None:
        """What release `release_id`'s speed is judged by. The new release: a baseline,
        else the release this run found current (outcome.previous_release). An earlier
        release this run goes back to (a rollback, a restore, the way back): a baseline
        only, since going back is the operator's call or the way out of a failure, and
        the release it replaces is the one being taken away."""
        if self.reference_facts is None:
            return None
        replaced = self.outcome.previous_release if release_id == self.plan.release_id else None
        return choose_reference(self.reference_facts, release_id, replaced)

    def gate(
        self,
        target: GateTarget,
        step: str,
        release_id: str,
        stop: threading.Event | None = None,
        key: ProbeKey | None = None,
    ) -> GateReport:
        """The gate of release `release_id`'s server, as `target` describes it, timed as
        `step`; its speed section names the reference and why it was chosen."""
        choice = self.reference(release_id)
        with self.step(step):
            report = self.run_gate(
                self.transport,
                self.plan.address,
                target.port,
                target.served_name,
                target.gate,
                self.buckets,
                self.plan.kind.failure_causes,
                stop,
                key,
                self.tick(step),
                self.clock,
                choice.reference if choice else None,
            )
        if choice and report.speed:
            judged = report.speed.reason
            report.speed.reason = (
                choice.why if choice.reference is None else f"{choice.why}; {judged}"
            )
        return report

    def admits(self, report: GateReport) -> bool:
        """See decision.admits, with this playbook's `on_inconclusive`."""
        return admits(Judged.of(report), self.playbook.gate.on_inconclusive)

    # -- steps ---------------------------------------------------------------------------
    def step(self, name: str) -> Timer:
        """Written to the journal (during a switch), then shown and timed: a run killed
        once its line is out has the step in its journal. On the way back a journal
        that cannot be written is said and passed by (`way_back`)."""
        self.journal_step(name)
        self.progress(self.name, name)
        return Timer(self.outcome.steps, name)

    @contextlib.contextmanager
    def way_back(self) -> Iterator[None]:
        """A way back to the release that served before (after a failed gate, a
        baseline's measure, a --replace's restore): the journal never blocks it.
        A step whose journal write fails (a full disk) goes on, and the run says so; the
        journal keeps the last step it holds, one the way forward wrote before its gate
        passed, so a run killed meanwhile is undone by the next the same way."""
        self.going_back = True
        try:
            yield
        finally:
            self.going_back = False

    def journal_step(self, step: str) -> None:
        """The step written to the journal (during a switch); on the way back, as far
        as the container allows."""
        if not self.going_back:
            self.journal.advance(step)
            return
        try:
            self.journal.advance(step)
        except OrchError as exc:
            if self.journal_lost is None:
                self.journal_lost = f"the journal could not be written at '{step}' ({exc})"
                self.outcome.notes.append(f"{self.journal_lost}; the way back went on")
                self.note(f"{self.journal_lost}: going back all the same")

    def tick(self, step: str) -> Tick:
        """What a step last saw (the gate's figures so far), as its progress."""
        return lambda figures: self.progress(self.name, step, figures)

    def note(self, text: str) -> None:
        self.progress(self.name, text)

    def lock_lost(self) -> str | None:
        """Why the lock is no longer this run's, read now: a renewal at each safe point
        (one round trip) notices `orch unlock --force` at the step boundary, not at the
        next heartbeat a quarter lease away. A container that cannot be reached just
        now leaves the heartbeat's last word."""
        if not self.lock.lost:
            with contextlib.suppress(OrchError):
                self.lock.renew()
        return self.lock.lost

    def still_ours(self) -> None:
        """A lock removed, or broken and taken by another run, meanwhile: this run
        switches nothing."""
        if lost := self.lock_lost():
            raise NeedsAttention(f"{lost}; nothing was switched", subject=self.name)

    def record_previous(self, previous: str | None, current: str) -> None:
        if previous and previous != current:
            store.point(self.transport, self.layout.previous, previous, "record previous")

    def prune(self, keep: frozenset[str]) -> None:
        """The releases past `releases_kept`, oldest first, but those in `keep`."""
        ordered = store.kept(self.transport, self.layout)
        old = [r for r in ordered[: -self.playbook.releases_kept] if r not in keep]
        if old:
            store.prune(self.transport, self.layout, old)

    def prune_after_failure(self, keep: frozenset[str]) -> None:
        """Pruned as after a pass, so releases left by failed runs (and by runs
        interrupted while writing one) never pile up past `releases_kept`; a failure to
        prune is a note, the transaction is already finished."""
        try:
            self.prune(keep)
        except OrchError as exc:
            self.outcome.notes.append(f"old releases not pruned: {exc}")

    def audit(self, action: str, record: object = None) -> None:
        """One line on the container's audit log: this run's outcome there, or `record`."""
        line = audit.audit_line(
            self.options.run_id,
            self.options.user,
            action,
            jsonable(self.outcome if record is None else record),
        )
        audit.append(self.transport, self.layout.audit_log, line)

    def finish(self, action: str) -> None:
        self.audit(action)
        self.journal.clear()


class Timer:
    """A step's seconds, added to what the step took before in this run."""

    def __init__(self, steps: dict[str, float], name: str) -> None:
        self.steps, self.name = steps, name

    def __enter__(self) -> None:
        self.started = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.steps[self.name] = self.steps.get(self.name, 0.0) + time.monotonic() - self.started
