"""stop, start, restart and remove a deployment's server on one container: each a
transaction under the deploy lock and the journal, recorded on the container's audit.

The release never changes. A start or restart is the switch to the release `current`
names (stop by PID, start, wait ready, gate) and a failed gate rolls nothing back; a
stop stops the server by its recorded PID; a remove stops it and deletes the
deployment but its audit log. A run that dies in a stop or remove is finished by the
next run there; one that dies in a start is started and gated again by it
(TargetRun._recover).
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.container import release as store
from orchestrator.container.journal import GATE_PASSED
from orchestrator.container.server import Server
from orchestrator.contract import Action
from orchestrator.deploy import Refused, TargetRun
from orchestrator.outcome import Outcome

ACTIONS: tuple[Action, ...] = ("stop", "start", "restart", "remove")
DONE: dict[Action, str] = {
    "stop": "stopped",
    "start": "started",
    "restart": "restarted",
    "remove": "removed",
}
"""Each action's target result when it did what was asked."""


class ServerActionRun(TargetRun):
    """One container's stop, start, restart or remove."""

    def act(self, action: Action) -> Outcome:
        bodies: dict[Action, Callable[[], None]] = {
            "stop": self._stop,
            "start": lambda: self._start_again("start"),
            "restart": lambda: self._start_again("restart"),
            "remove": self._remove,
        }
        return self._guard(bodies[action])

    def _stop(self) -> None:
        with self._locked():
            current = self._deployed()
            if not self._server().state().running:
                return self._left_as_it_is("stop", "no server of this deployment runs")
            self._begin("stop", current)
            with self._step("stop server"):
                self._server().stop(self.playbook.server.stop_timeout)
            self.outcome.result = DONE["stop"]
            self._finish("stop")

    def _start_again(self, action: Action) -> None:
        with self._locked():
            current = self._deployed()
            if current is None:
                raise Refused(2, f"nothing deployed here to {action} (orch deploy first)")
            if action == "start" and self._server().state().running:
                return self._left_as_it_is(
                    action, "its server already runs (orch restart restarts it)"
                )
            self._begin(action, current)
            out = self.outcome
            out.gate = self.switch(current, self._gate_target(current), cancellable=True)
            if out.gate.verdict.outcome == "pass" or (
                self._passed(out.gate) and not self.cancel.requested
            ):
                self.journal.advance(GATE_PASSED)
                out.result = DONE[action]
            else:
                self._not_admitted(current)
            self._finish(action)

    def _not_admitted(self, current: str) -> None:
        """A failed start rolls nothing back: the release is the one it was."""
        out = self.outcome
        assert out.gate is not None
        out.result, out.exit_code = "failed", 1
        out.error = (
            f"gate {out.gate.verdict.outcome}: {out.gate.verdict.reason}; {current} stays "
            "current (nothing to roll back: the release did not change)"
        )
        if not self._server().state().running:
            out.exit_code = 3
            out.error += "; its server is not running"
        if self.cancel.requested:
            out.result, out.exit_code = "interrupted", max(out.exit_code, self.cancel.exit_code)

    def _remove(self) -> None:
        with self._locked():
            current = self._deployed()
            self._begin("remove", current)
            with self._step("stop server"):
                self._server().stop(self.playbook.server.stop_timeout)
            with self._step("remove releases"):
                store.remove_deployment(self.transport, self.layout)
            self.outcome.result, self.outcome.current = DONE["remove"], None
            self._finish("remove")

    # -- steps -------------------------------------------------------------------------
    def _deployed(self) -> str | None:
        """The release `current` names: this run's release, before and after."""
        current = store.linked(self.transport, self.layout.current)
        out = self.outcome
        out.release = out.previous_release = out.current = current
        return current

    def _begin(self, action: Action, current: str | None) -> None:
        self._still_ours()
        self.journal.begin(self.options.run_id, action, str(self.owner), current, current or "")

    def _left_as_it_is(self, action: Action, why: str) -> None:
        self.outcome.result = "unchanged"
        self.outcome.notes.append(why)
        self._audit(action)

    def _server(self) -> Server:
        return Server(self.transport, self.layout, self.plan.address, self.plan.port)
