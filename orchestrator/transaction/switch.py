"""The switch: stop the running server by its PID, wait for its GPU memory, point
`current` at a release, start its server, wait until it is ready, gate it, watch it
settle; and the way back after a switch that did not stay."""

from __future__ import annotations

import dataclasses
import threading

from orchestrator import preflight
from orchestrator.container import store
from orchestrator.container.gpu import wait_free
from orchestrator.container.server import Server
from orchestrator.errors import Interrupted, OrchError, ServerFailed
from orchestrator.gate import GateReport
from orchestrator.metrics.assess import Verdict
from orchestrator.release import GateTarget
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.settle import unsettled

GPU_RELEASE_TIMEOUT = 120.0


def switch(
    d: Deployment, release_id: str, target: GateTarget, phase: str = "", cancellable: bool = False
) -> GateReport:
    """Stop the running server, point `current` at the release, start it, gate it and,
    when the gate admits it, watch it go on serving for `gate.settle_seconds` (a death
    there turns the verdict into a failure).

    Any failure on the way is a failed gate report, never an exception: once the
    old server may be stopped, the caller must always get to roll back. Step names
    carry `phase` ("rollback") so the two halves of a rollback time apart. Only a
    `cancellable` switch gives up its waits on a stop request; an undo does not.
    """
    prefix = f"{phase} " if phase else ""
    stop = d.cancel.event if cancellable else None
    server = d.server(target.port)
    try:
        key = d.probe_key(release_id)  # first: its values are masked from here on
        pid = start(d, server, release_id, prefix, stop)
    except ServerFailed as exc:
        return GateReport(
            failed_verdict(f"server did not become ready: {exc.reason}"),
            explanation=exc.log_tail.strip() or None,
        )
    except OrchError as exc:
        return GateReport(failed_verdict(f"switching to {release_id} failed: {exc}"))
    try:
        report = d.gate(target, f"{prefix}gate", release_id, stop, key)
    except Interrupted:
        raise
    except Exception as exc:  # a gate that cannot judge never keeps a release
        return GateReport(
            failed_verdict(f"the gate could not judge the server: {type(exc).__name__}: {exc}")
        )
    if d.admits(report) and not (stop and stop.is_set()):
        with d.step(f"{prefix}settle"):
            died = unsettled(server, pid, target, key, d.clock)
        if died:
            report.verdict = dataclasses.replace(report.verdict, outcome="fail", reason=died)
    return report


def start(
    d: Deployment, server: Server, release_id: str, prefix: str, stop: threading.Event | None
) -> int:
    """Stop the running server by its PID and wait for its GPU memory, point `current`
    at `release_id`, start its server, wait until it is ready (ServerFailed: it was not);
    the started server's PID."""
    with d.step(f"{prefix}stop server"):
        server.stop(d.playbook.server.stop_timeout)
        wait_free(
            d.transport,
            d.nvidia_smi,
            d.playbook.server.tensor_parallel_size,
            preflight.MIN_FREE_GPU_SHARE,
            timeout=GPU_RELEASE_TIMEOUT,
            tick=d.tick(f"{prefix}stop server (GPU memory)"),
            clock=d.clock,
        )
    if stop and stop.is_set():  # the old server is down: straight to the way back
        raise ServerFailed("interrupted before the switch of current")
    with d.step(f"{prefix}switch current"):
        store.point(d.transport, d.layout.current, release_id, "switch current")
    with d.step(f"{prefix}start server"):
        pid = server.start(release_id)
    with d.step(f"{prefix}wait ready"):
        timeout = d.gate_target(release_id).gate.ready_timeout
        waiting = d.tick(f"{prefix}wait ready (up to {timeout:.0f} s)")
        server.wait_ready(
            pid,
            timeout,
            tick=lambda _, line: waiting(f"server log: {line}" if line else ""),
            stop=stop,
            clock=d.clock,
        )
    return pid


def go_back(d: Deployment, to: str | None, stopped_on: str | None = None) -> GateReport | None:
    """Undo a switch: `to` made ready and gated with its own settings, or, with
    nothing to start again, the new server stopped and `current` pointed back at
    `stopped_on` (the release this deployment was on, stopped, before a --replace),
    or removed (the container is as before its first deploy: nothing deployed,
    nothing broken). Never cut short by a stop request, nor by a journal that cannot
    be written (Deployment.way_back)."""
    with d.way_back():
        if to:
            d.note(f"roll back to {to}")
            return switch(d, to, d.gate_target(to), phase="rollback")
        d.note(
            f"stop failed server; current back on {stopped_on} (stopped, as before this run)"
            if stopped_on
            else "stop failed server (no previous release)"
        )
        d.journal_step("stop failed server")
        d.stop_server()
        if stopped_on:
            store.point(d.transport, d.layout.current, stopped_on, "current back")
        else:
            store.unpoint(d.transport, d.layout.current, "unlink current")
        return None


def failed_verdict(reason: str) -> Verdict:
    return Verdict("fail", None, None, None, (), 0, reason)
