"""The gate on a live server: acceptance from probe traffic, then speed at the
concurrency the server will see (`run.run_gate`). One module a concept: `probe` (the
acceptance traffic), `scrape` (/metrics), `acceptance` (its phases), `speed` (the speed
levels, `measure_speed` callable alone; `run.measure_levels` a baseline's), `report`
(what it reports), `run` (both in turn)."""

from orchestrator.gate.report import (
    SOURCES,
    GateReport,
    PhaseReport,
    explain_phases,
    overall_verdict,
    speed_lines,
)
from orchestrator.gate.run import measure_levels, run_gate
from orchestrator.gate.scrape import SCRAPE_SECONDS, ScrapeFailed, scrape

__all__ = [
    "SCRAPE_SECONDS",
    "SOURCES",
    "GateReport",
    "PhaseReport",
    "ScrapeFailed",
    "explain_phases",
    "measure_levels",
    "overall_verdict",
    "run_gate",
    "scrape",
    "speed_lines",
]
