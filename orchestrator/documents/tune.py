"""`orch tune`'s document: each drafting depth's gated release and figures, the best
depth per speed level, the line that applies it, and where the container ended."""

from __future__ import annotations

from typing import Literal

from orchestrator.contract import Document, RunResult
from orchestrator.tuning import TUNED_FIELD, Best, TuneStep

Ending = Literal["best", "restored", "last", "interrupted", "none_passed"]
"""How the tune ended: on the best passing depth, on the release it started from
(`--restore`), on what the last deploy left (a final deploy that did not pass, or a
deploy ending in bad input or needing attention, which stops the tune), stopped by a signal,
or with no depth passing (each failing deploy rolled itself back)."""


class Tune(Document):
    kind: Literal["Tune"] = "Tune"
    playbook: str
    run_id: str
    """The tune's own id in the history (`orch report RUN_ID` draws its chart); each
    depth's deploy has its own."""
    started: str
    target: str
    """The container tuned on."""
    field: str = TUNED_FIELD
    values: list[int]
    result: RunResult
    steps: list[TuneStep]
    best: list[Best]
    chosen: int | None
    """The depth to keep: the best at the highest level (None: no depth passed)."""
    apply_with: str | None
    playbook_line: str | None
    started_on: str | None
    """The release serving before the first depth's deploy."""
    ended: Ending
    current: str | None
    """The release the container serves when the tune ends."""
    final_run_id: str | None
    """The run that put `current` in place after the depths (the best again, or the
    restore), None when the last depth's deploy ended the tune."""
    warnings: list[str] = []
    """The tune could not be recorded in the history (exit 3): why."""
