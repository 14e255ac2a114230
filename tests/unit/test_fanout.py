"""Fanning a run out over targets: every target gets its turn, whatever the others'."""

from __future__ import annotations

from orchestrator.errors import OrchError
from orchestrator.fanout import fan_out


def test_each_target_succeeds_or_fails_apart_in_order() -> None:
    def action(name: str) -> str:
        if name == "ct201":
            raise OrchError("unreachable", subject=name)
        return name.upper()

    group = fan_out(["ct200", "ct201", "ct202"], action, 2)
    assert group.succeeded == {"ct200": "CT200", "ct202": "CT202"}
    assert list(group.failed) == ["ct201"]
