"""The deploy transaction on one container, and rollback, which is the same
switch + ready + gate with an earlier release.

  preflight (read-only) -> lock -> write release -> cat-verify -> switch
  (stop old by PID, wait for its GPU memory, point `current`, start) -> ready
  -> gate -> keep, or roll back to the previous release.

A failure before the switch leaves the target untouched; after it, the
previous release is restored and its gate run again.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator import commands, preflight, release
from orchestrator.drafters.findings import Finding, Severity
from orchestrator.errors import LockHeld, OrchError, ServerFailed, StepFailed
from orchestrator.gate import GateReport, run_gate
from orchestrator.metrics.assess import Verdict
from orchestrator.plan import LAUNCH_SCRIPT, TargetPlan
from orchestrator.playbook import Playbook
from orchestrator.remote import run_step
from orchestrator.server import Server
from orchestrator.state import audit_line, now
from orchestrator.transport.base import Transport

Progress = Callable[[str, str], None]
GPU_RELEASE_TIMEOUT = 120.0  # (container, step description)


@dataclass(frozen=True)
class Options:
    run_id: str
    force: bool = False
    dry_run: bool = False
    diff: bool = False
    user: str = field(default_factory=getpass.getuser)


@dataclass
class Outcome:
    """What happened on one container; `result` is the contract of --json."""

    name: str
    host: str
    result: str = "failed"
    release: str | None = None
    previous_release: str | None = None
    server_version: str | None = None
    gate: GateReport | None = None
    rollback_gate: GateReport | None = None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    exit_code: int = 0
    diff: str = ""
    steps: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "host": self.host,
            "result": self.result,
            "release": self.release,
            "previous_release": self.previous_release,
            "server_version": self.server_version,
            "gate": self.gate.to_dict() if self.gate else None,
            "rollback_gate": self.rollback_gate.to_dict() if self.rollback_gate else None,
            "findings": [f.to_dict() for f in self.findings],
            "error": self.error,
            "steps": {k: round(v, 3) for k, v in self.steps.items()},
            **({"diff": self.diff} if self.diff else {}),
        }


class TargetRun:
    """One container's transaction; every remote action goes through `transport`."""

    def __init__(
        self,
        plan: TargetPlan,
        transport: Transport,
        playbook: Playbook,
        prompts: list[str],
        nvidia_smi: str,
        options: Options,
        progress: Progress = lambda *_: None,
    ) -> None:
        self.plan, self.transport, self.playbook = plan, transport, playbook
        self.prompts, self.nvidia_smi, self.options = prompts, nvidia_smi, options
        self.progress = progress
        self.server = Server(transport, plan.deployment_dir, plan.address, plan.port)
        self.outcome = Outcome(plan.container, plan.host, release=plan.release_id)

    # -- steps -------------------------------------------------------------
    def _step(self, name: str) -> _Timer:
        self.progress(self.plan.container, name)
        return _Timer(self.outcome.steps, name)

    def _preflight(self) -> preflight.Facts:
        with self._step("preflight"):
            facts = preflight.gather(self.transport, self.plan, self.nvidia_smi)
        server = self.playbook.server
        self.outcome.findings = preflight.judge(
            facts, self.plan, server.tensor_parallel_size, server.num_speculative_tokens
        )
        self.outcome.previous_release = facts.current_release
        self.outcome.server_version = facts.server_version
        return facts

    def _lock(self) -> None:
        owner = json.dumps(
            {
                "run_id": self.options.run_id,
                "user": self.options.user,
                "control_host": socket.gethostname(),
                "since": now(),
            }
        )
        result = self.transport.run(commands.acquire_lock(self.lock_dir, owner), timeout=60)
        if result.exit_code not in (0, 1):
            raise StepFailed(
                f"{self.plan.container}: cannot create the deploy lock "
                f"{self.lock_dir}: {result.error_text}"
            )
        if result.exit_code == 1:
            holder = result.text.strip() or "unknown owner"
            raise LockHeld(
                f"{self.plan.container}: deploy lock held: {holder}; if that run is "
                f"gone, remove it with 'orch unlock' (-i INVENTORY --limit "
                f"{self.plan.container})"
            )

    @property
    def lock_dir(self) -> str:
        return f"{self.plan.deployment_dir}/lock"

    def _unlock(self) -> None:
        self.transport.run(commands.release_lock(self.lock_dir, self.options.run_id), timeout=60)

    def _write_release(self, forced: list[Finding]) -> None:
        files = {
            **self.plan.files,
            release.MANIFEST: release.manifest(self.plan, self.options.run_id, forced),
        }
        with self._step("write release"):
            release.write(self.transport, self.plan, files)
        with self._step("cat-verify"):
            mismatches = release.verify(self.transport, self.plan, files)
        if mismatches:
            raise _Stop(
                1,
                "cat-verify failed, the server was not touched:\n"
                + "\n".join(str(m) for m in mismatches),
            )

    def switch(self, release_id: str, phase: str = "") -> GateReport:
        """Stop the running server, point `current` at the release, start it, gate it.

        Any failure on the way is a failed gate report, never an exception: once the
        old server may be stopped, the caller must always get to roll back. Step names
        carry `phase` ("rollback") so the two halves of a rollback time apart.
        """
        prefix = f"{phase} " if phase else ""
        try:
            self._start(release_id, prefix)
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
                self.plan.port,
                self.playbook.target.served_name,
                self.playbook.gate,
                self.prompts,
                self.plan.kind.failure_causes,
            )

    def _start(self, release_id: str, prefix: str) -> None:
        release_dir = f"{self.plan.deployment_dir}/releases/{release_id}"
        with self._step(f"{prefix}stop server"):
            self.server.stop(self.playbook.server.stop_timeout)
            self.server.wait_gpu_free(
                self.nvidia_smi,
                self.playbook.server.tensor_parallel_size,
                preflight.MIN_FREE_GPU_SHARE,
                timeout=GPU_RELEASE_TIMEOUT,
            )
        with self._step(f"{prefix}switch current"):
            run_step(
                self.transport,
                commands.point_link(
                    f"{self.plan.deployment_dir}/current", f"releases/{release_id}"
                ),
                "switch current",
            )
        with self._step(f"{prefix}start server"):
            pid = self.server.start(f"{release_dir}/{LAUNCH_SCRIPT}")
        with self._step(f"{prefix}wait ready"):
            timeout = self.playbook.gate.ready_timeout
            self.server.wait_ready(
                pid,
                timeout,
                tick=lambda waited: self.progress(
                    self.plan.container, f"{prefix}wait ready ({timeout - waited:.0f} s left)"
                ),
            )

    def _passed(self, report: GateReport) -> bool:
        """Pass; or inconclusive with `on_inconclusive: keep`, but only for a server
        that was measured and answered (a dead one is never kept)."""
        outcome = report.verdict.outcome
        served = report.verdict.drafts > 0 and report.request_errors < report.requests
        return outcome == "pass" or (
            outcome == "inconclusive" and self.playbook.gate.on_inconclusive == "keep" and served
        )

    def _audit(self, action: str) -> None:
        line = audit_line(self.options.run_id, self.options.user, action, self.outcome.to_dict())
        self.transport.run(
            commands.append_line(f"{self.plan.deployment_dir}/audit.log", line), timeout=60
        )

    def _prune(self, keep: set[str]) -> None:
        ordered = release.kept(self.transport, self.plan.deployment_dir)
        old = [r for r in ordered[: -self.playbook.releases_kept] if r not in keep]
        if old:
            releases_dir = f"{self.plan.deployment_dir}/releases"
            run_step(self.transport, commands.remove_releases(releases_dir, old), "prune")

    # -- the transaction -----------------------------------------------------
    def deploy(self) -> Outcome:
        """Preflight under the lock, so the facts it reads stay true until the switch."""
        out = self.outcome
        try:
            if self.options.dry_run:
                self._dry_run()
                return out
            self._lock()
            try:
                facts = self._preflight()
                self._transaction(facts, self._blocking_errors())
            finally:
                self._unlock()
        except _Stop as stop:
            out.exit_code, out.error = stop.exit_code, stop.message
        except OrchError as exc:
            out.exit_code, out.error = exc.exit_code, str(exc)
            out.result = "failed"
        return out

    def _blocking_errors(self) -> list[Finding]:
        """Preflight errors; they stop the deploy unless forced (then they are recorded)."""
        errors = [f for f in self.outcome.findings if f.severity == Severity.ERROR]
        if errors and not self.options.force:
            raise _Stop(
                1,
                f"preflight found {len(errors)} error(s); nothing was changed "
                "(--force deploys anyway, and keeps the rollback)",
            )
        return errors

    def _dry_run(self) -> None:
        facts = self._preflight()
        self.outcome.result = "dry_run"
        if self.options.diff:
            self.outcome.diff = self._diff(facts.current_release)

    def _transaction(self, facts: preflight.Facts, forced: list[Finding]) -> None:
        out = self.outcome
        previous = facts.current_release
        if previous == self.plan.release_id and facts.server.running:
            with self._step("cat-verify"):
                mismatches = release.verify(self.transport, self.plan, self.plan.files)
            if not mismatches:
                out.result, out.previous_release = "unchanged", previous
                return
        self._write_release(forced)
        out.gate = self.switch(self.plan.release_id)
        if self._passed(out.gate):
            out.result = "deployed"
            if previous and previous != self.plan.release_id:
                run_step(
                    self.transport,
                    commands.point_link(
                        f"{self.plan.deployment_dir}/previous", f"releases/{previous}"
                    ),
                    "record previous",
                )
            self._prune({self.plan.release_id, previous or ""})
            self._audit("deploy")
            return
        out.exit_code, out.error = 1, f"gate {out.gate.verdict.outcome}: {out.gate.verdict.reason}"
        if forced:
            cited = "; ".join(f"{f.field} {f.actual!r} (expected {f.expected!r})" for f in forced)
            out.gate.explanation = ". ".join(
                filter(None, [out.gate.explanation, f"Preflight had found: {cited}"])
            )
        if previous == self.plan.release_id:  # redeployed the current one: go further back
            previous = release.linked(self.transport, f"{self.plan.deployment_dir}/previous")
        if not previous or previous == self.plan.release_id:
            self.progress(self.plan.container, "stop failed server (no previous release)")
            self.server.stop(self.playbook.server.stop_timeout)
            out.result = "failed"
            self._audit("deploy")
            return
        self.progress(self.plan.container, f"roll back to {previous}")
        out.rollback_gate = self.switch(previous, phase="rollback")
        if self._passed(out.rollback_gate):
            out.result = "rolled_back"
        else:
            out.result, out.exit_code = "failed", 3
            out.error += (
                f"; ROLLBACK to {previous} did not pass either: {out.rollback_gate.verdict.reason}"
            )
        self._audit("deploy")

    def rollback(self, to: str | None) -> Outcome:
        """Switch to an earlier release (default: the one before `current`) and gate it."""
        out = self.outcome
        try:
            deployment = self.plan.deployment_dir
            current = release.linked(self.transport, f"{deployment}/current")
            target = to or release.linked(self.transport, f"{deployment}/previous")
            if not target:
                raise _Stop(2, "no previous release to roll back to (give --to RELEASE_ID)")
            on_target = release.kept(self.transport, deployment)
            if target not in on_target:
                raise _Stop(
                    2, f"release {target!r} is not on the target (kept: {', '.join(on_target)})"
                )
            out.release, out.previous_release = target, current
            self._lock()
            try:
                out.gate = self.switch(target)
                if self._passed(out.gate):
                    out.result = "rolled_back"
                    if current and current != target:
                        run_step(
                            self.transport,
                            commands.point_link(f"{deployment}/previous", f"releases/{current}"),
                            "record previous",
                        )
                else:
                    out.result, out.exit_code = "failed", 3
                    out.error = f"gate {out.gate.verdict.outcome}: {out.gate.verdict.reason}"
                self._audit("rollback")
            finally:
                self._unlock()
        except _Stop as stop:
            out.exit_code, out.error = stop.exit_code, stop.message
        except OrchError as exc:
            out.exit_code, out.error, out.result = exc.exit_code, str(exc), "failed"
        return out

    def _diff(self, current: str | None) -> str:
        if current is None:
            return "(no current release: every file is new)"
        old = release.read_back(
            self.transport, f"{self.plan.deployment_dir}/releases/{current}", list(self.plan.files)
        )
        return "".join(
            release.unified_diff(old.get(name, b""), data, name)
            for name, data in self.plan.files.items()
        )


class _Stop(Exception):
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
