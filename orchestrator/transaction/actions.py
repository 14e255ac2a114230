"""stop, start, restart and remove a deployment's server on one container: each a
transaction under the deploy lock and the journal, recorded on the container's audit.

The release never changes. A start or restart is the switch to the release `current`
names (stop by PID, start, wait ready, gate) and a failed gate rolls nothing back; a
stop stops the server by its recorded PID; a remove stops it and deletes the
deployment but its audit log. A run that dies in a stop or remove is finished by the
next run there; one that dies in a start is started and gated again by it
(orchestrator/transaction/recovery.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from orchestrator.container import store
from orchestrator.container.journal import GATE_PASSED
from orchestrator.contract import Action
from orchestrator.transaction.decision import Judged, keeps
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.guard import Refused, guard
from orchestrator.transaction.outcome import Outcome
from orchestrator.transaction.recovery import locked
from orchestrator.transaction.switch import switch

ACTIONS: tuple[Action, ...] = ("stop", "start", "restart", "remove")
DONE: dict[Action, Literal["stopped", "started", "restarted", "removed"]] = {
    "stop": "stopped",
    "start": "started",
    "restart": "restarted",
    "remove": "removed",
}
"""Each action's target result when it did what was asked."""


class ServerActionRun:
    """One container's stop, start, restart or remove."""

    def __init__(self, d: Deployment) -> None:
        self.d = d

    def act(self, action: Action) -> Outcome:
        bodies: dict[Action, Callable[[], None]] = {
            "stop": self._stop,
            "start": lambda: self._start_again("start"),
            "restart": lambda: self._start_again("restart"),
            "remove": self._remove,
        }
        return guard(self.d.outcome, bodies[action])

    def _stop(self) -> None:
        d = self.d
        with locked(d):
            current = self._deployed()
            if not d.server().state().running:
                return self._left_as_it_is("stop", "no server of this deployment runs")
            self._begin("stop", current)
            with d.step("stop server"):
                d.stop_server()
            d.outcome.result = DONE["stop"]
            d.finish("stop")

    def _start_again(self, action: Action) -> None:
        d, out = self.d, self.d.outcome
        with locked(d):
            current = self._deployed()
            if current is None:
                raise Refused(2, f"nothing deployed here to {action} (orch deploy first)")
            if action == "start" and d.server().state().running:
                return self._left_as_it_is(
                    action, "its server already runs (orch restart restarts it)"
                )
            self._begin(action, current)
            out.gate = switch(d, current, d.gate_target(current), cancellable=True)
            if keeps(Judged.of(out.gate), d.playbook.gate.on_inconclusive, d.cancel.requested):
                d.journal.advance(GATE_PASSED)
                out.result = DONE[action]
            else:
                self._not_admitted(current)
            d.finish(action)

    def _not_admitted(self, current: str) -> None:
        """A failed start rolls nothing back: the release is the one it was."""
        d, out = self.d, self.d.outcome
        assert out.gate is not None
        out.result, out.exit_code = "failed", 1
        out.error = (
            f"gate {out.gate.verdict.outcome}: {out.gate.verdict.reason}; {current} stays "
            "current (nothing to roll back: the release did not change)"
        )
        if not d.server().state().running:
            out.exit_code = 3
            out.error += "; its server is not running"
        if d.cancel.requested:
            out.result, out.exit_code = "interrupted", max(out.exit_code, d.cancel.exit_code)

    def _remove(self) -> None:
        d = self.d
        with locked(d):
            current = self._deployed()
            self._begin("remove", current)
            with d.step("stop server"):
                d.stop_server()
            with d.step("remove releases"):
                store.remove_deployment(d.transport, d.layout)
            d.outcome.result, d.outcome.current = DONE["remove"], None
            d.finish("remove")

    def _deployed(self) -> str | None:
        """The release `current` names: this run's release, before and after."""
        current = store.linked(self.d.transport, self.d.layout.current)
        out = self.d.outcome
        out.release = out.previous_release = out.current = current
        return current

    def _begin(self, action: Action, current: str | None) -> None:
        d = self.d
        d.still_ours()
        d.journal.begin(d.options.run_id, action, str(d.owner), current, current or "")

    def _left_as_it_is(self, action: Action, why: str) -> None:
        self.d.outcome.result = "unchanged"
        self.d.outcome.notes.append(why)
        self.d.audit(action)
