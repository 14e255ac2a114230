"""The example inventory's containers, scripted in memory behind the fleet commands'
`connect`: for the tests of the command bodies and of their documents."""

from __future__ import annotations

from typing import Any

from examples import EXAMPLE, PLAYBOOK
from scripted import ScriptedContainer

from orchestrator import cli_commands, release
from orchestrator.connections import Given
from orchestrator.container.audit import audit_line
from orchestrator.layout import DRAFTER_CONFIG, VIEW_CONFIG
from orchestrator.release import GateTarget
from orchestrator.transport.base import Transport

RUN_A, RUN_B = "20261201T100000Z-aaaaaa", "20261202T100000Z-bbbbbb"


def inputs(*assignments: str) -> cli_commands.Inputs:
    return cli_commands.load(str(PLAYBOOK), EXAMPLE, [], list(assignments))


class Fleet:
    """The example inventory's containers (ct129 by SSH, ct200 by pct), scripted."""

    def __init__(self, *assignments: str) -> None:
        self.inputs = inputs(*assignments)
        self.plans = {p.container: p for p in self.inputs.plans}
        self.containers = {
            name: ScriptedContainer(name, plan.layout) for name, plan in self.plans.items()
        }
        self.transports: dict[str, Transport] = {
            name: c.transport for name, c in self.containers.items()
        }

    @property
    def connect(self) -> Any:
        return Given.connect(self.transports)

    def deployed(self, name: str, run_id: str = RUN_A, release_id: str | None = None) -> str:
        """The playbook's release on `name` as a deploy leaves it: files, manifest, view,
        `current`, a running server, an audit line with a passed gate."""
        plan, container = self.plans[name], self.containers[name]
        files = dict(plan.files)
        files["manifest.json"] = release.manifest(
            plan, self.inputs.playbook, run_id, [], GateTarget.of(self.inputs.playbook)
        )
        if DRAFTER_CONFIG in files:
            files[VIEW_CONFIG] = files[DRAFTER_CONFIG]
        rid = release_id or plan.release_id
        container.release(rid, files, current=True)
        container.run_server()
        outcome = {"result": "deployed", "release": rid, "current": rid}
        container.audit(
            audit_line(run_id, "ops", "deploy", {**outcome, "gate": {"verdict": "pass"}})
        )
        return rid
