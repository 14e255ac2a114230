"""The deploy transaction on one container, and rollback, which is the same
switch + ready + gate with an earlier release.

  lock -> recover an interrupted run -> preflight -> write release -> cat-verify
  -> journal -> switch (stop old by PID, wait for its GPU memory, point
  `current`, start) -> ready -> gate -> keep, or go back to the previous release.

A failure or a stop request before the switch leaves the target untouched;
after it, the previous release is restored and gated with its own settings.
The journal on the target records each step of the switch, so a run that dies
in it is undone by the next run there.
"""

from __future__ import annotations

import getpass
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import preflight, release
from orchestrator.cancel import Cancel
from orchestrator.container import audit
from orchestrator.container import release as store
from orchestrator.container.gpu import wait_free
from orchestrator.container.journal import (
    GATE_PASSED,
    UNKNOWN_RUN,
    Journal,
    Transaction,
    Unreadable,
)
from orchestrator.container.lock import DeployLock, Owner
from orchestrator.container.server import Server
from orchestrator.contract import jsonable
from orchestrator.deadline import now
from orchestrator.drafters.findings import Finding, Severity
from orchestrator.errors import Interrupted, NeedsAttention, OrchError, ServerFailed
from orchestrator.gate import GateReport, run_gate
from orchestrator.layout import LAUNCH_SCRIPT
from orchestrator.metrics.assess import Verdict
from orchestrator.outcome import Outcome
from orchestrator.plan import TargetPlan
from orchestrator.playbook import Playbook
from orchestrator.probes.context import ContextBucket
from orchestrator.progress import Progress, no_progress
from orchestrator.release import GateTarget
from orchestrator.secrets import ProbeKey, plain_findings, probe_key
from orchestrator.transport.base import Transport

ShowDiff = Callable[[str, str], None]  # (container, its release's diff), before the switch
Neighbours = Callable[[str], "TargetRun | None"]
"""A run of another playbook (a name or file) on the same container, None when that
playbook has no plan here: the one `--replace` stops, or a recovery restores."""
GPU_RELEASE_TIMEOUT = 120.0
FINISHED_ON_RECOVERY = {"stop": "stopped", "remove": "removed"}
"""Interrupted actions the next run finishes rather than undoes, with the result it records."""


@dataclass(frozen=True)
class Options:
    run_id: str
    force: bool = False
    dry_run: bool = False
    diff: bool = False
    user: str = field(default_factory=getpass.getuser)
    replace: str | None = None
    """`deploy --replace`: the other playbook whose server on each container this deploy
    stops in its transaction, and starts again if the new release does not pass."""
    inventory: str = "INVENTORY"
    """The inventory as the user named it, for the commands messages suggest."""


class TargetRun:
    """One container's transaction; every remote action goes through `transport`."""

    def __init__(
        self,
        plan: TargetPlan,
        transport: Transport,
        playbook: Playbook,
        buckets: list[ContextBucket],
        nvidia_smi: str,
        options: Options,
        progress: Progress = no_progress,
        cancel: Cancel | None = None,
        show_diff: ShowDiff = lambda *_: None,
        neighbours: Neighbours = lambda _: None,
    ) -> None:
        self.plan, self.transport, self.playbook = plan, transport, playbook
        self.neighbours = neighbours
        self.replacing: TargetRun | None = None
        """With --replace: the other playbook's run on this container, its lock held."""
        self.was_serving = False
        self.show_diff = show_diff
        self.buckets, self.nvidia_smi, self.options = buckets, nvidia_smi, options
        self.progress = progress
        self.cancel = cancel or Cancel()
        self.layout = plan.layout
        self.owner = Owner.me(options.run_id, options.user)
        self.lock = DeployLock(transport, self.layout, self.owner, playbook.lock_lease)
        self.journal = Journal(transport, self.layout)
        self.outcome = Outcome(plan.container, plan.host, release=plan.release_id)

    # -- the transaction -----------------------------------------------------
    def deploy(self) -> Outcome:
        """Preflight under the lock, so the facts it reads stay true until the switch."""
        return self._guard(self._deploy)

    def rollback(self, to: str | None) -> Outcome:
        """Switch to an earlier release (default: the one before `current`) and gate it."""
        return self._guard(lambda: self._rollback(to))

    def _deploy(self) -> None:
        if self.options.dry_run:
            return self._dry_run()
        with self._locked(), self._replaced_locked():
            facts = self._preflight()
            self.was_serving = facts.server.running
            forced = self._blocking_errors()
            previous = facts.current_release
            if previous == self.plan.release_id and facts.server.running and self._unchanged():
                self.outcome.current = previous
                self._diff(previous)
                self._regate_if_settings_changed(previous)
                self._audit("deploy")  # the run names this container's state too
                return
            self.cancel.check()
            self._write_release(forced)
            self._diff(previous)
            self.cancel.check()  # the last safe point before the old server stops
            self._still_ours()
            self._switch_and_judge("deploy", previous, self.plan.release_id, forced)

    def _rollback(self, to: str | None) -> None:
        with self._locked():
            current = store.linked(self.transport, self.layout.current)
            self.outcome.current = current
            target = to or store.linked(self.transport, self.layout.previous)
            if not target:
                raise Refused(2, "no previous release to roll back to (give --to RELEASE_ID)")
            on_target = store.kept(self.transport, self.layout)
            if target not in on_target:
                raise Refused(
                    2, f"release {target!r} is not on the target (kept: {', '.join(on_target)})"
                )
            self.outcome.release, self.outcome.previous_release = target, current
            server = Server(self.transport, self.layout, self.plan.address, self.plan.port)
            if target == current and server.state().running:
                self.outcome.result, self.outcome.current = "unchanged", current
                self._audit("rollback")
                return
            self._verify_kept(target)
            self.cancel.check()
            self._still_ours()
            self._switch_and_judge("rollback", current, target, [])

    def _regate_if_settings_changed(self, release_id: str) -> None:
        """The same release with other gate settings: the running server gated again
        with them, no restart; on a pass its manifest records them (later rollbacks
        to it gate so), on a fail it keeps serving with its recorded settings."""
        wanted = GateTarget.of(self.playbook)
        if release.gate_target(self.transport, self.layout, release_id, wanted) == wanted:
            return
        with self._step("gate (new settings)"):
            report = run_gate(
                self.transport,
                self.plan.address,
                wanted.port,
                wanted.served_name,
                wanted.gate,
                self.buckets,
                self.plan.kind.failure_causes,
                self.cancel.event,
                tick=self._gate_tick("gate (new settings)"),
            )
        self.outcome.gate = report
        if self._passed(report):
            release.record_gate_target(
                self.transport, self.layout, release_id, wanted, self.options.run_id
            )
            self.outcome.result = "regated"
            return
        self.outcome.result, self.outcome.exit_code = "failed", 1
        self.outcome.error = (
            f"gate {report.verdict.outcome} with the new settings: {report.verdict.reason}; "
            f"{release_id} keeps serving, its manifest keeps its recorded settings"
        )

    def _still_ours(self) -> None:
        """A lock broken and taken by another run meanwhile (its heartbeat found it
        gone): this run switches nothing."""
        if self.lock.lost:
            raise NeedsAttention(
                f"{self.lock.lost}; nothing was switched", subject=self.plan.container
            )

    def _verify_kept(self, target: str) -> None:
        """The rollback target's files against its manifest, before anything stops: a
        release changed by hand is refused (with --force: recorded and rolled back to)."""
        with self._step("verify rollback target"):
            mismatches = release.verify_kept(self.transport, self.plan, target)
        if not mismatches:
            return
        listed = "\n".join(str(m) for m in mismatches)
        if self.options.force:
            self.outcome.notes.append(
                f"rolling back to {target} changed on the target (--force):\n{listed}"
            )
            return
        raise Refused(
            1,
            f"release {target} changed on the target since it was applied; nothing was "
            f"changed (--force rolls back to it anyway):\n{listed}",
        )

    def _switch_and_judge(
        self, action: str, previous: str | None, new: str, forced: list[Finding]
    ) -> None:
        """Journal, switch, gate; keep `new` if it passed, else go back to `previous`."""
        out = self.outcome
        replaced = self._replaced_record() if action == "deploy" else None
        # Replacing another server: what ran before was that one, not a release of ours.
        back_to = None if replaced and not self.was_serving else previous
        self.journal.begin(self.options.run_id, action, str(self.owner), back_to, new, replaced)
        if replaced and self.replacing:
            self.replacing.stop_replaced(self.plan.playbook)
        out.gate = self.switch(new, self._gate_target(new), cancellable=True)
        verdict = out.gate.verdict
        if verdict.outcome == "pass" or (self._passed(out.gate) and not self.cancel.requested):
            self.journal.advance(GATE_PASSED)
            out.result, out.current = ("deployed" if action == "deploy" else "rolled_back"), new
            self._record_previous(previous, new)
            if action == "deploy":
                self._prune({new, previous or ""})
            if replaced and self.replacing:
                out.replaced = self.replacing.stay_stopped(replaced["release"], self.plan.playbook)
            self._finish(action)
            return
        out.exit_code, out.error = 1, f"gate {verdict.outcome}: {verdict.reason}"
        if forced:
            cited = "; ".join(f"{f.field} {f.actual!r} (expected {f.expected!r})" for f in forced)
            out.gate.explanation = ". ".join(
                filter(None, [out.gate.explanation, f"Preflight had found: {cited}"])
            )
        if previous == new:  # redeployed the current one: go further back
            previous = store.linked(self.transport, self.layout.previous)
        back = previous if previous != new and (back_to or not replaced) else None
        out.rollback_gate = self._go_back(back)
        out.current = back
        out.result = "rolled_back" if action == "deploy" and out.rollback_gate else "failed"
        if replaced and self.replacing:
            out.replaced = self.replacing.restore(replaced["release"], self.plan.playbook)
            if out.replaced["result"] == "restored":
                out.result = "rolled_back"
            else:
                out.exit_code = 3
                out.error += f"; RESTORE of {replaced['playbook']} failed: {out.replaced['error']}"
        if out.rollback_gate and not self._passed(out.rollback_gate):
            out.result, out.exit_code = "failed", 3
            reason = out.rollback_gate.verdict.reason
            gated = bool(out.rollback_gate.phases)  # else the switch back failed before a gate
            out.error += (
                f"; ROLLBACK to {back} did not pass either: {reason}"
                if gated
                else f"; ROLLBACK to {back} failed: {reason}"
            )
        if self.cancel.requested:
            out.result, out.exit_code = "interrupted", max(out.exit_code, self.cancel.exit_code)
            out.error = "interrupted before its gate passed; " + (
                f"back on {back}"
                if back
                else f"{replaced['playbook']} restored"
                if replaced
                else "its server stopped (nothing to go back to)"
            )
        self._finish(action)
        if action == "deploy":  # releases of failed and interrupted runs count too
            self._prune_after_failure({new, back or ""})

    def _go_back(self, to: str | None) -> GateReport | None:
        """Undo a switch: `to` made ready and gated with its own settings, or, with
        nothing to go back to, the new server stopped and `current` removed (the
        container is as before its first deploy: nothing deployed, nothing broken).
        Never cut short by a stop request."""
        if not to:
            self._step_note("stop failed server (no previous release)")
            self.journal.advance("stop failed server")
            Server(self.transport, self.layout, self.plan.address, self.plan.port).stop(
                self.playbook.server.stop_timeout
            )
            store.unpoint(self.transport, self.layout.current, "unlink current")
            return None
        self._step_note(f"roll back to {to}")
        return self.switch(to, self._gate_target(to), phase="rollback")

    def _finish(self, action: str) -> None:
        self._audit(action)
        self.journal.clear()

    # -- recovery of an interrupted run ------------------------------------------
    def _recover(self) -> None:
        """A journal left by a run that died in its switch: keep what was gated, undo
        the rest, before this run does its own work."""
        found = self.journal.read()
        if found is None:
            return
        interrupted = found if isinstance(found, Transaction) else self._infer(found)
        if interrupted is None:
            return
        self._step_note(f"recover interrupted {interrupted.describe()}")
        self.journal.active = interrupted
        back_on: str | None
        if interrupted.action in FINISHED_ON_RECOVERY:
            back_on, report = self._finish_interrupted(interrupted), None
        elif interrupted.gated:
            self._record_previous(interrupted.from_release, interrupted.to_release)
            back_on, report = interrupted.to_release, None
        else:
            back_on = interrupted.from_release
            report = self._go_back(back_on)
        replaced = self._settle_replaced(interrupted)
        self._audit_recovery(interrupted, back_on, report)
        self.journal.clear()
        self.outcome.recovered = {
            "inferred": None if isinstance(found, Transaction) else interrupted.owner,
            "run_id": interrupted.run_id,
            "started": interrupted.started,
            "action": interrupted.action,
            "step": interrupted.step,
            "from_release": interrupted.from_release,
            "to_release": interrupted.to_release,
            "back_on": back_on,
            "gate": report,
            "replaced": replaced,
        }
        self.outcome.notes.append(
            f"recovered interrupted run {interrupted.run_id} (stopped at '{interrupted.step}'): "
            + (
                f"finished its {interrupted.action}"
                if interrupted.action in FINISHED_ON_RECOVERY
                else f"now on {back_on}"
                if back_on
                else "its server stopped, nothing to go back to"
            )
        )
        if report is not None and not self._passed(report):
            raise NeedsAttention(
                f"recovering interrupted run {interrupted.run_id}: "
                f"{back_on} did not pass its gate: {report.verdict.reason}",
                subject=self.plan.container,
            )
        if replaced and replaced["result"] == "failed":
            raise NeedsAttention(
                f"recovering interrupted run {interrupted.run_id}: {replaced['playbook']} "
                f"was not restored: {replaced['error']}",
                subject=self.plan.container,
            )

    # -- deploy --replace ---------------------------------------------------------------
    @contextmanager
    def _replaced_locked(self) -> Iterator[None]:
        """With --replace: the other playbook's deployment on this container, locked (and
        its own interrupted run recovered) for the whole transaction."""
        other = self.neighbours(self.options.replace) if self.options.replace else None
        if other is None:
            if self.options.replace:
                self.outcome.notes.append(
                    f"--replace {self.options.replace}: that playbook has no plan here"
                )
            yield
            return
        with other._locked():
            self.replacing = other
            try:
                yield
            finally:
                self.replacing = None

    def _replaced_record(self) -> dict[str, str] | None:
        """What the journal records of the server --replace stops: None when none runs."""
        other = self.replacing
        if other is None or not other.server().state().running:
            return None
        current = store.linked(other.transport, other.layout.current)
        if current is None:
            return None
        return {
            "playbook": other.plan.playbook,
            "file": str(Path(other.playbook.source).resolve()) if other.playbook.source else "",
            "release": current,
        }

    def server(self) -> Server:
        """This deployment's server, as its plan serves it."""
        return Server(self.transport, self.layout, self.plan.address, self.plan.port)

    def stop_replaced(self, by: str) -> None:
        """Stop this deployment's server, for `by`'s deploy --replace."""
        with self._step(f"stop {self.plan.playbook}'s server (replaced by {by})"):
            self.server().stop(self.playbook.server.stop_timeout)

    def stay_stopped(self, release_id: str, by: str) -> dict[str, Any]:
        """`by`'s release passed: this deployment stays stopped, as its audit says."""
        out = self.outcome
        out.release = out.previous_release = out.current = release_id
        out.result = "stopped"
        out.notes.append(f"replaced by {by}")
        self._audit("stop")
        return {"playbook": self.plan.playbook, "release": release_id, "result": "stopped"}

    def restore(self, release_id: str, by: str) -> dict[str, Any]:
        """`by`'s release did not pass: this deployment's release started again, made
        ready and gated with its own recorded settings, as its audit says."""
        self._step_note(f"restore {self.plan.playbook} {release_id}")
        report = self.switch(release_id, self._gate_target(release_id), phase="restore")
        out = self.outcome
        out.release = out.previous_release = out.current = release_id
        out.gate = report
        passed = self._passed(report)
        out.result = "started" if passed else "failed"
        out.notes.append(f"restored after {by} did not pass")
        self._audit("start")
        return {
            "playbook": self.plan.playbook,
            "release": release_id,
            "result": "restored" if passed else "failed",
            "gate": report,
            "error": None if passed else report.verdict.reason,
        }

    def _settle_replaced(self, interrupted: Transaction) -> dict[str, Any] | None:
        """An interrupted replace: the other deployment stays stopped if the new release
        had passed, else it is started again and gated."""
        if not interrupted.replaced:
            return None
        name, release_id = interrupted.replaced["playbook"], interrupted.replaced["release"]
        other = self.neighbours(interrupted.replaced.get("file") or name) or self.neighbours(name)
        if other is None:
            raise NeedsAttention(
                f"interrupted run {interrupted.run_id} stopped {name}'s server to replace it, "
                f"and {name}'s playbook cannot be loaded here to settle it: "
                f"`orch start {name} -i {self.options.inventory} --limit {self.plan.container}`",
                subject=self.plan.container,
            )
        with other._locked():
            if interrupted.gated:
                return other.stay_stopped(release_id, self.plan.playbook)
            return other.restore(release_id, self.plan.playbook)

    def _finish_interrupted(self, interrupted: Transaction) -> str | None:
        """A stop or remove that died half way is finished, as its operator asked:
        the server stopped by its PID (and the deployment removed). Returns the
        release left current."""
        Server(self.transport, self.layout, self.plan.address, self.plan.port).stop(
            self.playbook.server.stop_timeout
        )
        if interrupted.action == "remove":
            store.remove_deployment(self.transport, self.layout)
            return None
        return interrupted.from_release

    def _infer(self, unreadable: Unreadable) -> Transaction | None:
        """The interrupted transaction as the container shows it, for a journal that
        cannot be read: `current` is where its switch got to; the release the last
        recorded run left current on (the audit) is where it started; a server
        running on that same release means nothing was left to undo. Says so."""
        records = store.read_records(self.transport, self.layout)
        started_on = next((r.current for r in reversed(records.audit) if r.current), None)
        current = records.current
        server = Server(self.transport, self.layout, self.plan.address, self.plan.port).state()
        taken = self.lock.taken_from
        run_id = taken.run_id if taken else UNKNOWN_RUN
        origin = started_on or current
        seen = (
            f"{unreadable.describe()}; inferred from the container: current names "
            f"{current or 'nothing'}, the audit's last run left {started_on or 'nothing'} "
            f"current, the server is {server.status}"
            + (f" (pid {server.pid})" if server.pid else "")
        )
        kept = current is not None and current == origin and server.running
        verdict = "nothing to undo" if kept else f"going back to {origin or 'nothing'}"
        self.outcome.notes.append(f"{seen}: {verdict}")
        self._step_note(f"{seen}: {verdict}")
        if current is None and origin is None:
            self.journal.clear()
            return None
        stamp = now()
        return Transaction(
            run_id,
            "unknown",
            f"{seen}: {verdict}",
            origin,
            current or origin or "",
            GATE_PASSED if kept else "unknown",
            stamp,
            stamp,
        )

    # -- the switch ------------------------------------------------------------
    def switch(
        self, release_id: str, target: GateTarget, phase: str = "", cancellable: bool = False
    ) -> GateReport:
        """Stop the running server, point `current` at the release, start it, gate it.

        Any failure on the way is a failed gate report, never an exception: once the
        old server may be stopped, the caller must always get to roll back. Step names
        carry `phase` ("rollback") so the two halves of a rollback time apart. Only a
        `cancellable` switch gives up its waits on a stop request; an undo does not.
        """
        prefix = f"{phase} " if phase else ""
        stop = self.cancel.event if cancellable else None
        server = Server(self.transport, self.layout, self.plan.address, target.port)
        try:
            key = self._probe_key(release_id)  # first: its values are masked from here on
            self._start(server, release_id, prefix, stop)
        except ServerFailed as exc:
            return GateReport(
                _failed_verdict(f"server did not become ready: {exc.reason}"),
                explanation=exc.log_tail.strip() or None,
            )
        except OrchError as exc:
            return GateReport(_failed_verdict(f"switching to {release_id} failed: {exc}"))
        with self._step(f"{prefix}gate"):
            return run_gate(
                self.transport,
                self.plan.address,
                target.port,
                target.served_name,
                target.gate,
                self.buckets,
                self.plan.kind.failure_causes,
                stop,
                key,
                self._gate_tick(f"{prefix}gate"),
            )

    def _probe_key(self, release_id: str) -> ProbeKey | None:
        """The key the release's server requires: the new release's from the plan, an
        earlier one's from its own files on the target."""
        if release_id == self.plan.release_id:
            return probe_key(self.plan.files[LAUNCH_SCRIPT], self.plan.secrets_file)
        return release.release_key(self.transport, self.layout.release(release_id))

    def _start(
        self, server: Server, release_id: str, prefix: str, stop: threading.Event | None
    ) -> None:
        with self._step(f"{prefix}stop server"):
            server.stop(self.playbook.server.stop_timeout)
            wait_free(
                self.transport,
                self.nvidia_smi,
                self.playbook.server.tensor_parallel_size,
                preflight.MIN_FREE_GPU_SHARE,
                timeout=GPU_RELEASE_TIMEOUT,
                tick=lambda held: self.progress(
                    self.plan.container, f"{prefix}stop server (GPU memory)", held
                ),
            )
        if stop and stop.is_set():  # the old server is down: straight to the way back
            raise ServerFailed("interrupted before the switch of current")
        with self._step(f"{prefix}switch current"):
            store.point(self.transport, self.layout.current, release_id, "switch current")
        with self._step(f"{prefix}start server"):
            pid = server.start(release_id)
        with self._step(f"{prefix}wait ready"):
            timeout = self._gate_target(release_id).gate.ready_timeout
            server.wait_ready(
                pid,
                timeout,
                tick=lambda _, line: self.progress(
                    self.plan.container,
                    f"{prefix}wait ready (up to {timeout:.0f} s)",
                    f"server log: {line}" if line else "",
                ),
                stop=stop,
            )

    # -- steps -------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the lock (taking over a gone owner's) and recover a run that died in its
        switch before this run's own work; the lock is released whatever happens."""
        with self.lock.held() as taken_over:
            if taken_over:
                self.outcome.notes.append(taken_over)
                self._step_note(taken_over)
            self._recover()
            yield

    def _step(self, name: str) -> _Timer:
        """Written to the journal (during a switch), then shown and timed: a run killed
        once its line is out has the step in its journal."""
        self.journal.advance(name)
        self.progress(self.plan.container, name)
        return _Timer(self.outcome.steps, name)

    def _gate_tick(self, step: str) -> Callable[[str], None]:
        """The gate's figures so far, as what its step last saw."""
        return lambda figures: self.progress(self.plan.container, step, figures)

    def _step_note(self, text: str) -> None:
        self.progress(self.plan.container, text)

    def _gate_target(self, release_id: str) -> GateTarget:
        """The new release is gated as the playbook says; an earlier one as its manifest
        recorded (a release made before manifests recorded it: as the playbook says)."""
        current = GateTarget.of(self.playbook)
        if release_id == self.plan.release_id:
            return current
        return release.gate_target(self.transport, self.layout, release_id, current)

    def _preflight(self) -> preflight.Facts:
        with self._step("preflight"):
            facts = preflight.gather(self.transport, self.plan, self.nvidia_smi)
        server = self.playbook.server
        self.outcome.findings = preflight.judge(
            facts,
            self.plan,
            server.tensor_parallel_size,
            server.num_speculative_tokens,
            self.playbook.gate.probe.sampling,
            preflight.Others(
                self.replacing.plan.playbook if self.replacing else None, self.options.inventory
            ),
        ) + plain_findings(server)
        self.outcome.previous_release = self.outcome.current = facts.current_release
        self.outcome.server_version = facts.server_version
        return facts

    def _blocking_errors(self) -> list[Finding]:
        """Preflight errors; they stop the deploy unless forced (then they are recorded)."""
        errors = [f for f in self.outcome.findings if f.severity == Severity.ERROR]
        if errors and not self.options.force:
            raise Refused(
                1,
                f"preflight found {len(errors)} error(s); nothing was changed "
                "(--force deploys anyway, and keeps the rollback)",
            )
        return errors

    def _unchanged(self) -> bool:
        with self._step("cat-verify"):
            mismatches = release.verify(self.transport, self.plan, self.plan.files)
        if not mismatches:
            self.outcome.result = "unchanged"
        return not mismatches

    def _write_release(self, forced: list[Finding]) -> None:
        files = {
            **self.plan.files,
            release.MANIFEST: release.manifest(
                self.plan, self.playbook, self.options.run_id, forced, GateTarget.of(self.playbook)
            ),
        }
        with self._step("write release"):
            release.write(self.transport, self.plan, files)
        with self._step("cat-verify"):
            mismatches = release.verify(self.transport, self.plan, files)
        if mismatches:
            raise Refused(
                1,
                "cat-verify failed, the server was not touched:\n"
                + "\n".join(str(m) for m in mismatches),
            )

    def _passed(self, report: GateReport) -> bool:
        """Pass; or inconclusive with `on_inconclusive: keep`, but only for a server
        that was measured and answered (a dead one is never kept)."""
        outcome = report.verdict.outcome
        served = report.verdict.drafts > 0 and report.request_errors < report.requests
        return outcome == "pass" or (
            outcome == "inconclusive" and self.playbook.gate.on_inconclusive == "keep" and served
        )

    def _record_previous(self, previous: str | None, current: str) -> None:
        if previous and previous != current:
            store.point(self.transport, self.layout.previous, previous, "record previous")

    def _prune_after_failure(self, keep: set[str]) -> None:
        """Pruned as after a pass, so releases left by failed runs (and by runs
        interrupted while writing one) never pile up past `releases_kept`; a failure to
        prune is a note, the transaction is already finished."""
        try:
            self._prune(keep)
        except OrchError as exc:
            self.outcome.notes.append(f"old releases not pruned: {exc}")

    def _prune(self, keep: set[str]) -> None:
        ordered = store.kept(self.transport, self.layout)
        old = [r for r in ordered[: -self.playbook.releases_kept] if r not in keep]
        if old:
            store.prune(self.transport, self.layout, old)

    def _audit(self, action: str) -> None:
        self._append_audit(action, self.outcome)

    def _audit_recovery(
        self, interrupted: Transaction, back_on: str | None, report: GateReport | None
    ) -> None:
        self._append_audit(
            "recover",
            {
                "result": FINISHED_ON_RECOVERY.get(interrupted.action, "recovered"),
                "release": back_on,
                "current": back_on,
                "previous_release": interrupted.to_release,
                "gate": report,
                "interrupted_run": interrupted.run_id,
            },
        )

    def _append_audit(self, action: str, target: Outcome | dict[str, Any]) -> None:
        line = audit.audit_line(self.options.run_id, self.options.user, action, jsonable(target))
        audit.append(self.transport, self.layout.audit_log, line)

    def _dry_run(self) -> None:
        """Preflight and, with --diff, the diff; an error finding fails the dry run as
        it would stop the deploy."""
        if interrupted := self.journal.read():
            self.outcome.notes.append(f"interrupted transaction here: {interrupted.describe()}")
        if self.options.replace:  # judged as the deploy would, with no lock taken
            self.replacing = self.neighbours(self.options.replace)
        facts = self._preflight()
        self.outcome.result = "dry_run"
        self._diff(facts.current_release)
        errors = sum(f.severity == Severity.ERROR for f in self.outcome.findings)
        if errors:
            self.outcome.exit_code = 1
            self.outcome.error = f"preflight found {errors} error(s); " + (
                "--force deploys anyway and records them"
                if self.options.force
                else "a deploy would stop there (--force deploys anyway)"
            )

    def _diff(self, current: str | None) -> None:
        """Each file of the current release against the new one: recorded for the run's
        report on every deploy, and with --diff also shown at once (on a deploy: before
        the old server stops). A dry run reads it only with --diff."""
        if self.options.dry_run and not self.options.diff:
            return
        old = (
            store.read_back(
                self.transport, self.layout.release(current), [*release.RENDERED, release.MANIFEST]
            )
            if current
            else {}
        )
        applied = release.Applied.parse(old.pop(release.MANIFEST, None))
        self.outcome.changes = release.changes(
            self.plan.container,
            self.layout.release(current) if current else None,
            old,
            self.plan.release_dir,
            self.plan.files,
            (applied.secrets if applied else {}, self.plan.secrets),
        )
        if self.options.diff:
            self.outcome.diff = self.outcome.changes
            self.show_diff(self.plan.container, self.outcome.diff)

    def _guard(self, body: Callable[[], None]) -> Outcome:
        """The outcome, whatever ended the run on this container."""
        out = self.outcome
        try:
            body()
        except Refused as stop:
            out.exit_code, out.error = stop.exit_code, stop.message
        except Interrupted as exc:
            out.result, out.exit_code = "interrupted", exc.exit_code
            out.error = "interrupted before the switch: nothing was changed"
            out.current = out.previous_release
        except OrchError as exc:
            out.exit_code, out.error, out.result = (
                exc.exit_code,
                exc.message_for(out.name),
                "failed",
            )
        return out


class Refused(Exception):
    """The run stops on this container with nothing changed (or nothing more)."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code, self.message = exit_code, message


class _Timer:
    def __init__(self, steps: dict[str, float], name: str) -> None:
        self.steps, self.name = steps, name

    def __enter__(self) -> None:
        self.started = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.steps[self.name] = self.steps.get(self.name, 0.0) + time.monotonic() - self.started


def _failed_verdict(reason: str) -> Verdict:
    return Verdict("fail", None, None, None, (), 0, reason)
