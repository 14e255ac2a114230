"""A fleet of scripted containers (tests/scripted.py) for the fleet command bodies:
the example inventory's containers, reached through in-memory connections, and the
JSON contract every body's document keeps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from examples import EXAMPLE, PLAYBOOK
from scripted import ScriptedContainer

from orchestrator import release
from orchestrator.connections import Given
from orchestrator.container.audit import audit_line
from orchestrator.contract import API_VERSION, Document, jsonable
from orchestrator.documents import AnyDocument
from orchestrator.fleet.inputs import Inputs, load
from orchestrator.lab.models import published_drafter_config, write_dflash_dir, write_target_dir
from orchestrator.layout import DRAFTER_CONFIG, VIEW_CONFIG
from orchestrator.release import GateTarget
from orchestrator.transport.base import Transport

FAST = [
    "gate.min_drafts=50",
    "gate.probe.scrape_interval=0.02",
    "gate.probe.concurrency=1",
    "gate.settle_seconds=0",
]
RUN_A, RUN_B = "20261201T100000Z-aaaaaa", "20261202T100000Z-bbbbbb"


def inputs(*assignments: str) -> Inputs:
    return load(str(PLAYBOOK), EXAMPLE, [], list(assignments))


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


def checked(printed: Document | dict[str, Any], kind: str) -> dict[str, Any]:
    """Valid against the schema, its envelope first, `name` (never `container`) per target:
    the document as `--json` prints it."""
    document = jsonable(printed)
    AnyDocument.model_validate(document)
    assert list(document)[:2] == ["kind", "api_version"]
    assert (document["kind"], document["api_version"]) == (kind, API_VERSION)
    assert all(list(t)[:2] == ["name", "host"] for t in document.get("targets", []))
    assert "container" not in json.dumps(document)
    return document


def by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in document["targets"]}


def write_models(directory: Path) -> dict[str, Path]:
    """The published target and drafter dirs, as local files for scripted containers."""
    write_target_dir(directory / "target", "Qwen3.6-27B")
    write_dflash_dir(directory / "drafter", published_drafter_config("z-lab/Qwen3.6-27B-DFlash"))
    return {"target": directory / "target", "drafter": directory / "drafter"}


def with_models(fleet: Fleet, models: dict[str, Path]) -> None:
    """Each container's model dirs hold `models` (write_models)."""
    for name, plan in fleet.plans.items():
        fleet.containers[name].models[plan.target_dir] = models["target"]
        if plan.drafter_weights:
            fleet.containers[name].models[plan.drafter_weights] = models["drafter"]
