"""A run's document built as its run builds it, with the fields a test does not care
about filled in."""

from __future__ import annotations

from typing import Any

from orchestrator.documents.runs import DeployRun
from orchestrator.rollout import RolloutPlan, RolloutRun
from orchestrator.transaction.outcome import Outcome


def deploy_run(targets: list[Outcome], **fields: Any) -> DeployRun:
    return DeployRun(
        **{
            "playbook": "qwen-dflash",
            "run_id": "r1",
            "started": "2026-12-02T10:00:00+00:00",
            "method": "dflash",
            "drafter": "z-lab/Qwen3.6-27B-DFlash",
            "model": "qwen3.6-27b",
            "inventory": "/srv/inventory.yaml",
            "assignments": [],
            "result": "ok",
            "targets": targets,
            "rollout": RolloutRun(RolloutPlan(1, 1, 0, None), [], []),
            "connections": [],
            **fields,
        }
    )
