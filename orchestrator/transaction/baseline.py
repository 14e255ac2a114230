"""The baseline on one container: the gated release that serves stopped by its PID, the
same target served with the same launch minus the speculative config (a release-like
directory of its own, `baseline-<digest>`), its speed measured at the playbook's
`gate.speed` levels, the record written and read back, then the gated release switched
back to and gated again. The journal records action `baseline` from the gated release:
interrupted at any step, this run (SIGINT, SIGTERM) or the next one (SIGKILL) goes back
to it, as after an interrupted switch."""

from __future__ import annotations

import dataclasses

from orchestrator.baseline import (
    BASELINE_PREFIX,
    BaselineLevel,
    BaselineRecord,
    digest,
    parse_record,
    record_json,
)
from orchestrator.container import store
from orchestrator.container.shell import read_whole, run_step, write_file
from orchestrator.deadline import now
from orchestrator.errors import NeedsAttention, OrchError, ServerFailed
from orchestrator.gate.probe import Target
from orchestrator.layout import LAUNCH_SCRIPT
from orchestrator.plan import TargetPlan
from orchestrator.release import GateTarget
from orchestrator.secrets import probe_key
from orchestrator.transaction import reference, releases
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.guard import Refused, guard
from orchestrator.transaction.outcome import Outcome
from orchestrator.transaction.recovery import locked
from orchestrator.transaction.switch import start, switch

ACTION = "baseline"


def baseline_plan(plan: TargetPlan, launch: str) -> TargetPlan:
    """The plan's release without speculation: its launch only, in its own directory."""
    release_id = BASELINE_PREFIX + digest(launch.encode())[:12]
    return dataclasses.replace(
        plan, release_id=release_id, files={LAUNCH_SCRIPT: launch.encode()}, drafter_config=None
    )


class ContainerBaseline:
    """One container's baseline; every remote action goes through `d`."""

    def __init__(self, d: Deployment) -> None:
        self.d = d

    def run(self) -> Outcome:
        return guard(self.d.outcome, self._run)

    def _run(self) -> None:
        d, out = self.d, self.d.outcome
        with locked(d):
            gated = store.linked(d.transport, d.layout.current)
            out.previous_release = out.current = gated
            if not gated or not d.server().state().running:
                raise Refused(
                    2,
                    "no gated release serving here: a baseline is measured beside one "
                    "(deploy or start it first); nothing was changed",
                )
            launch = reference.baseline_launch(d.plan, d.playbook.server.template)
            plan = baseline_plan(d.plan, launch)
            out.release = plan.release_id
            with d.step("fingerprint"):
                fingerprint = reference.read_fingerprint(d, gated)
            if fingerprint is None:
                raise Refused(
                    1, "the target's files, GPUs or vLLM version could not be read: no baseline"
                )
            with d.step("write baseline release"):
                releases.write(d.transport, plan, plan.files)
            with d.step("cat-verify"):
                mismatches = releases.verify(d.transport, plan, plan.files)
            if mismatches:
                raise Refused(
                    1,
                    "cat-verify failed, the server was not touched:\n"
                    + "\n".join(str(m) for m in mismatches),
                )
            d.cancel.check()  # the last safe point before the gated server stops
            d.still_ours()
            d.journal.begin(d.options.run_id, ACTION, str(d.owner), gated, plan.release_id)
            recorded = False
            try:
                measured = self._measure(plan)
                if measured is not None:
                    record = BaselineRecord(fingerprint, measured, d.options.run_id, now(), gated)
                    self._record(record)
                    out.baseline, recorded = record, True
            except OrchError as exc:  # the gated release is served again whatever failed
                out.error = exc.message_for(d.name)
            self._back(gated, plan.release_id, recorded)

    def _measure(self, plan: TargetPlan) -> tuple[BaselineLevel, ...] | None:
        """The baseline server's speed levels; None when it did not start or measured
        nothing (the outcome says why)."""
        d, out = self.d, self.d.outcome
        served = GateTarget.of(d.playbook)
        server = d.server(served.port)
        try:
            start(d, server, plan.release_id, "baseline ", d.cancel.event)
        except ServerFailed as exc:
            out.error = f"the server without speculation did not become ready: {exc.reason}"
            return None
        key = probe_key(plan.files[LAUNCH_SCRIPT], d.plan.secrets_file)
        target = Target(d.transport, d.plan.address, served.port, served.served_name, key)
        step = "baseline speed"
        with d.step(step):
            speed = d.measure(target, served.gate, d.buckets, d.cancel.event, d.tick(step), d.clock)
        speed.reason = "served without speculation: what later gates judge speedup by"
        out.speed = speed
        if d.cancel.requested:
            out.error = "interrupted while measuring the baseline"
            return None
        levels = tuple(
            BaselineLevel(
                lv.concurrency,
                lv.requests,
                lv.per_stream_tokens_per_second,
                lv.total_tokens_per_second,
                lv.batch_measured,
            )
            for lv in speed.levels
        )
        if not any(lv.total_tokens_per_second for lv in levels):
            out.error = "the server without speculation answered no speed request"
            return None
        return levels

    def _record(self, record: BaselineRecord) -> None:
        """Written atomically, then read back whole and compared."""
        d = self.d
        data = record_json(record)
        with d.step("record baseline"):
            run_step(d.transport, write_file(d.layout.baseline, data), "write the baseline", data)
            back = read_whole(d.transport, [d.layout.baseline], "read the baseline back")
        if parse_record(back.get(d.layout.baseline, b"")) != record:
            raise NeedsAttention(
                f"{d.layout.baseline} does not read back as written", subject=d.name
            )

    def _back(self, gated: str, baseline_release: str, measured: bool) -> None:
        """The gated release served and gated again (judged against the new baseline),
        the baseline's directory pruned, the journal cleared."""
        d, out = self.d, self.d.outcome
        d.reference_facts = reference.read_facts(d, reference.read_fingerprint(d, gated))
        with d.way_back():  # a journal that cannot be written never keeps it off
            out.gate = switch(d, gated, d.gate_target(gated), phase="back")
        out.current = gated
        store.prune(d.transport, d.layout, [baseline_release])
        back_passed = d.admits(out.gate)
        if measured and back_passed and not d.cancel.requested:
            out.result = "measured"
        elif d.cancel.requested:
            out.result, out.exit_code = "interrupted", d.cancel.exit_code
            out.error = f"interrupted: back on {gated}" + (
                "" if back_passed else ", its gate did not pass"
            )
        else:
            out.result, out.exit_code = "failed", 1 if back_passed else 3
            reasons = [out.error] if out.error else []
            if not back_passed:
                reasons.append(f"{gated} did not pass its gate again: {out.gate.verdict.reason}")
            out.error = "; ".join(reasons) + f"; back on {gated}"
        d.finish(ACTION)
