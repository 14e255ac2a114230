"""Audit lines of two fleet runs on three containers, as the runs tests read them."""

from __future__ import annotations

import json

RUN_A = "20261201T100000Z-aaaaaa"
RUN_B = "20261201T110000Z-bbbbbb"


def line(run_id: str, time: str, action: str, result: str, made: str, current: str | None) -> str:
    return json.dumps(
        {
            "run_id": run_id,
            "time": time,
            "user": "ops",
            "action": action,
            "result": result,
            "release": made,
            "current": current,
        }
    )


def fleet_lines() -> list[str]:
    return [
        line(RUN_A, "t1", "deploy", "deployed", "a1111111", "a1111111"),
        line(RUN_B, "t2", "deploy", "deployed", "b1111111", "b1111111"),
    ]
