"""The deploy transaction for one container, and rollback, which is the same switch +
ready + gate with an earlier release: lock, preflight, write, cat-verify, switch, gate,
then keep or go back as orchestrator/transaction/decision.py decides."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from orchestrator import preflight, release
from orchestrator.container import store, verdict
from orchestrator.container.journal import GATE_PASSED
from orchestrator.container.pause import Decision
from orchestrator.deadline import now
from orchestrator.drafters.findings import Finding, Severity
from orchestrator.errors import OrchError
from orchestrator.playbook import command_name
from orchestrator.release import GateTarget
from orchestrator.secrets import plain_findings
from orchestrator.transaction import pause, reference, releases, replace
from orchestrator.transaction.decision import (
    GoBack,
    Judged,
    Switched,
    Switching,
    WentBack,
    after_gate,
    keeps,
    settled,
    way_back,
)
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.guard import Refused, guard
from orchestrator.transaction.outcome import Outcome
from orchestrator.transaction.recovery import locked
from orchestrator.transaction.switch import go_back, switch

ShowDiff = Callable[[str, str], None]  # (container, its release's diff), before the switch


class TargetRun:
    """One container's deploy or rollback; every remote action goes through `d`."""

    def __init__(self, d: Deployment, show_diff: ShowDiff = lambda *_: None) -> None:
        self.d, self.show_diff = d, show_diff
        self.replacing: Deployment | None = None
        """With --replace: the other playbook's deployment on this container, its lock held."""
        self.was_serving = False

    def deploy(self) -> Outcome:
        """Preflight under the lock, so the facts it reads stay true until the switch."""
        return guard(self.d.outcome, self._deploy)

    def rollback(self, to: str | None) -> Outcome:
        """Switch to an earlier release (default: the one before `current`) and gate it."""
        return guard(self.d.outcome, lambda: self._rollback(to))

    def _deploy(self) -> None:
        d = self.d
        if d.options.dry_run:
            return self._dry_run()
        with locked(d), self._replaced_locked():
            facts = self._preflight()
            plan = d.plan  # the launch preflight chose (gate.acceptance_source: auto)
            d.reference_facts = reference.read_facts(
                d, reference.fingerprint(d, facts.target, facts.server_version, facts.gpus)
            )
            self.was_serving = facts.server.running
            forced = self._blocking_errors()
            self._keep_verdict(facts)
            previous = facts.current_release
            if previous == plan.release_id and facts.server.running and self._unchanged():
                d.outcome.current = previous
                self._diff(previous)
                self._regate_if_settings_changed(previous)
                d.audit("deploy")  # the run names this container's state too
                return
            d.cancel.check()
            self._write_release(forced)
            self._diff(previous)
            d.cancel.check()  # the last safe point before the old server stops
            d.still_ours()
            self._switch_and_judge("deploy", previous, plan.release_id, forced)

    def _rollback(self, to: str | None) -> None:
        d, out = self.d, self.d.outcome
        with locked(d):
            current = store.linked(d.transport, d.layout.current)
            out.current = current
            target = to or store.linked(d.transport, d.layout.previous)
            if not target:
                raise Refused(2, "no previous release to roll back to (give --to RELEASE_ID)")
            on_target = store.kept(d.transport, d.layout)
            if target not in on_target:
                raise Refused(
                    2, f"release {target!r} is not on the target (kept: {', '.join(on_target)})"
                )
            out.release, out.previous_release = target, current
            if target == current and d.server().state().running:
                out.result, out.current = "unchanged", current
                d.audit("rollback")
                return
            self._verify_kept(target)
            d.reference_facts = reference.read_facts(d, reference.read_fingerprint(d))
            d.cancel.check()
            d.still_ours()
            self._switch_and_judge("rollback", current, target, [])

    def _regate_if_settings_changed(self, release_id: str) -> None:
        """The same release with other gate settings: the running server gated again
        with them, no restart; on a pass its manifest records them (later rollbacks
        to it gate so), on a fail it keeps serving with its recorded settings."""
        d, out = self.d, self.d.outcome
        wanted = GateTarget.of(d.playbook)
        if releases.gate_target(d.transport, d.layout, release_id, wanted) == wanted:
            return
        report = d.gate(wanted, "gate (new settings)", release_id, d.cancel.event)
        out.gate = report
        if d.admits(report):
            releases.record_gate_target(d.transport, d.layout, release_id, wanted, d.options.run_id)
            out.result = "regated"
            return
        out.result, out.exit_code = "failed", 1
        out.error = (
            f"gate {report.verdict.outcome} with the new settings: {report.verdict.reason}; "
            f"{release_id} keeps serving, its manifest keeps its recorded settings"
        )

    def _verify_kept(self, target: str) -> None:
        """The rollback target's files against its manifest, before anything stops: a
        release changed by hand is refused (with --force: recorded and rolled back to)."""
        with self.d.step("verify rollback target"):
            mismatches = releases.verify_kept(self.d.transport, self.d.plan, target)
        if not mismatches:
            return
        listed = "\n".join(str(m) for m in mismatches)
        if self.d.options.force:
            self.d.outcome.notes.append(
                f"rolling back to {target} changed on the target (--force):\n{listed}"
            )
            return
        raise Refused(
            1,
            f"release {target} changed on the target since it was applied; nothing was "
            f"changed (--force rolls back to it anyway):\n{listed}",
        )

    def _switch_and_judge(
        self, action: Switching, previous: str | None, new: str, forced: list[Finding]
    ) -> None:
        """Journal, switch, gate; keep `new` if it passed, else go back to `previous`."""
        d, out, other = self.d, self.d.outcome, self.replacing
        replaced = replace.journal_record(other) if action == "deploy" else None
        back = way_back(previous, replaced is not None, self.was_serving)
        d.journal.begin(
            d.options.run_id, action, str(d.owner), back.to, new, replaced, back.stopped_on
        )
        if replaced and other:
            replace.stop(other, d.plan.playbook)
        out.gate = switch(d, new, d.gate_target(new), cancellable=True)
        promoted = False
        if action == "deploy":
            out.gate, promoted = pause.decided(d, new, out.gate)
        judged = Judged.of(out.gate, promoted)
        on_inconclusive = d.playbook.gate.on_inconclusive
        cancelled = d.cancel.requested
        # A redeploy of the current release that does not stay goes one further back.
        further = previous == new and not keeps(judged, on_inconclusive, cancelled)
        earlier = store.linked(d.transport, d.layout.previous) if further else None
        decision = after_gate(
            Switched(
                action,
                new,
                previous,
                judged,
                on_inconclusive,
                cancelled,
                earlier,
                replaced is not None and other is not None,
                self.was_serving,
            )
        )
        if not isinstance(decision, GoBack):
            d.journal.advance(GATE_PASSED)
            out.result, out.current = decision.result, new
            if promoted and out.decisions:
                self._record_promotion(new, out.decisions[-1])
            d.record_previous(decision.record_previous, new)
            lost = self._stopped_if_lock_lost(f"{new} passed its gate and stays")
            if decision.prune_keeping is not None and not lost:
                d.prune(decision.prune_keeping)
            if replaced and other and decision.replaced_stays_stopped:
                out.replaced = replace.stay_stopped(other, replaced["release"], d.plan.playbook)
            d.finish(action)
            return
        if forced:
            cited = "; ".join(f"{f.field} {f.actual!r} (expected {f.expected!r})" for f in forced)
            out.gate.explanation = ". ".join(
                filter(None, [out.gate.explanation, f"Preflight had found: {cited}"])
            )
        out.rollback_gate = go_back(d, decision.to, decision.stopped_on)
        out.current = decision.to or decision.stopped_on
        if replaced and other and decision.restore_replaced:
            out.replaced = replace.restore(other, replaced["release"], d.plan.playbook)
        ending = settled(
            WentBack(
                action,
                judged,
                decision.to,
                Judged.of(out.rollback_gate) if out.rollback_gate else None,
                on_inconclusive,
                (out.replaced.playbook, out.replaced.result, out.replaced.error)
                if out.replaced and out.replaced.result != "stopped"
                else None,
                d.cancel.requested,
                d.cancel.exit_code,
                decision.stopped_on,
            )
        )
        out.result, out.exit_code, out.error = ending.result, ending.exit_code, ending.error
        lost = self._stopped_if_lock_lost(f"back on {out.current or 'nothing'}")
        d.finish(action)
        if decision.prune_keeping is not None and not lost:
            self.d.prune_after_failure(decision.prune_keeping)

    def _record_promotion(self, release_id: str, decision: Decision) -> None:
        """The manifest says who promoted the release; one that cannot say so is a
        note: the release is kept, the audit and the history record the decision."""
        try:
            releases.record_promotion(self.d.transport, self.d.layout, release_id, decision)
        except OrchError as exc:
            self.d.outcome.notes.append(f"the promotion was not recorded in the manifest: {exc}")

    def _stopped_if_lock_lost(self, where: str) -> bool:
        """The safe point after the switch settled (a gated release, or the way back,
        in place): a lock lost meanwhile stops the run here, old releases unpruned,
        the container needing attention (exit 3), saying why."""
        lost = self.d.lock_lost()
        if lost:
            out = self.d.outcome
            out.exit_code = max(out.exit_code, 3)
            out.error = "; ".join(
                filter(None, [out.error, f"{lost}: stopped after the switch ({where})"])
            )
            out.notes.append(f"{lost}; old releases not pruned")
        return lost is not None

    @contextmanager
    def _replaced_locked(self) -> Iterator[None]:
        """With --replace: the other playbook's deployment on this container, locked (and
        its own interrupted run recovered) for the whole transaction."""
        d = self.d
        other = d.neighbours(d.options.replace) if d.options.replace else None
        if other is None:
            if d.options.replace:
                d.outcome.notes.append(
                    f"--replace {d.options.replace}: that playbook has no plan here"
                )
            yield
            return
        with locked(other):
            self.replacing = other
            try:
                yield
            finally:
                self.replacing = None

    def _preflight(self) -> preflight.Facts:
        d, out = self.d, self.d.outcome
        with d.step("preflight"):
            served = preflight.gather_for_server(
                d.transport,
                d.plan,
                d.nvidia_smi,
                d.options.recheck,
                lambda part: d.progress(d.name, "preflight", part),
            )
        if served.source and served.plan is not d.plan:
            d.serve(served.plan)
            out.notes.append(served.source.why)
        facts = served.facts
        if facts.server_check and facts.server_check.reused:
            out.notes.append(
                f"the server check reused vLLM {facts.server_version}'s passing verdict on "
                f"this launch from {facts.server_check.reused} (--recheck checks again)"
            )
        server = d.playbook.server
        out.findings = preflight.judge(
            facts,
            d.plan,
            server.tensor_parallel_size,
            server.num_speculative_tokens,
            d.playbook.gate.probe.sampling,
            preflight.Others(
                self.replacing.plan.playbook if self.replacing else None,
                d.options.inventory,
                command_name(d.playbook),
            ),
        ) + plain_findings(server)
        out.previous_release = out.current = facts.current_release
        out.server_version = facts.server_version
        return facts

    def _keep_verdict(self, facts: preflight.Facts) -> None:
        """A server check that ran now and passed is kept for the next run; one that
        cannot be kept costs that run a check, never this one its deploy."""
        d = self.d
        kept = preflight.verdict_to_keep(facts, d.options.run_id, now())
        if kept is None:
            return
        try:
            verdict.keep(d.transport, d.layout.server_check, kept)
        except OrchError as exc:
            d.outcome.notes.append(f"the server check's verdict was not kept: {exc}")

    def _blocking_errors(self) -> list[Finding]:
        """Preflight errors; they stop the deploy unless forced (then they are recorded)."""
        errors = [f for f in self.d.outcome.findings if f.severity == Severity.ERROR]
        if errors and not self.d.options.force:
            raise Refused(
                1,
                f"preflight found {len(errors)} error(s); nothing was changed "
                "(--force deploys anyway, and keeps the rollback)",
            )
        return errors

    def _unchanged(self) -> bool:
        with self.d.step("cat-verify"):
            mismatches = releases.verify(self.d.transport, self.d.plan, self.d.plan.files)
        if not mismatches:
            self.d.outcome.result = "unchanged"
        return not mismatches

    def _write_release(self, forced: list[Finding]) -> None:
        d, plan = self.d, self.d.plan
        gate = GateTarget.of(d.playbook)
        made = release.manifest(plan, d.playbook, d.options.run_id, forced, gate)
        files = {**plan.files, release.MANIFEST: made}
        with d.step("write release"):
            releases.write(d.transport, plan, files)
        with d.step("cat-verify"):
            mismatches = releases.verify(d.transport, plan, files)
        if mismatches:
            raise Refused(
                1,
                "cat-verify failed, the server was not touched:\n"
                + "\n".join(str(m) for m in mismatches),
            )

    def _dry_run(self) -> None:
        """Preflight and, with --diff, the diff; an error finding fails the dry run as
        it would stop the deploy."""
        d, out = self.d, self.d.outcome
        if interrupted := d.journal.read():
            out.notes.append(f"interrupted transaction here: {interrupted.describe()}")
        if d.options.replace:  # judged as the deploy would, with no lock taken
            self.replacing = d.neighbours(d.options.replace)
        facts = self._preflight()
        out.result = "dry_run"
        self._diff(facts.current_release)
        errors = sum(f.severity == Severity.ERROR for f in out.findings)
        if errors:
            out.exit_code = 1
            out.error = f"preflight found {errors} error(s); " + (
                "--force deploys anyway and records them"
                if d.options.force
                else "a deploy would stop there (--force deploys anyway)"
            )

    def _diff(self, current: str | None) -> None:
        """Each file of the current release against the new one: recorded for the run's
        report on every deploy, and with --diff also shown at once (on a deploy: before
        the old server stops). A dry run reads it only with --diff."""
        d = self.d
        if d.options.dry_run and not d.options.diff:
            return
        d.outcome.changes = releases.changes_from(d.transport, d.plan, current)
        if d.options.diff:
            d.outcome.diff = d.outcome.changes
            self.show_diff(d.plan.container, d.outcome.diff)
