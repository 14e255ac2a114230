"""The document of one round of `orch watch`: each container's acceptance over the
last window of live traffic, against the gate's minimums."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel

from orchestrator.container.pause import Choice
from orchestrator.contract import Document, OnlyWhenSet, RunResult
from orchestrator.durations import Seconds

Acceptance = Literal[
    "ok", "below", "too_few_drafts", "not_drafting", "nothing_deployed", "unreachable"
]
"""Where a container's window stands against the gate's minimums (`nothing_deployed`:
no server to watch, no release current yet)."""


class PausedRun(BaseModel):
    """A run whose gate paused on the container, waiting for a decision: the release it
    serves meanwhile, since when, and the commands that decide."""

    run_id: str
    release: str
    since: str
    decide: dict[Choice, str]


class WatchEntry(BaseModel):
    """One container in a `Watch` document: its window's figures and where it stands."""

    name: str
    host: str
    acceptance: Acceptance
    mean_acceptance_length: float | None
    position1_acceptance: float | None
    per_position_acceptance: list[float]
    drafts: int
    drafts_per_second: float | None
    window_seconds: Seconds
    below_since: str | None
    counter_resets: int
    reason: str
    paused: Annotated[PausedRun | None, OnlyWhenSet] = None
    """Only while a run's gate is paused there (`gate.on_inconclusive: pause`)."""


class Thresholds(BaseModel):
    """The gate's minimums each window is judged against."""

    min_mean_acceptance_length: float
    min_position1_acceptance: float | None
    min_drafts: int


class Watch(Document):
    kind: Literal["Watch"] = "Watch"
    playbook: str
    result: RunResult
    time: str
    window_seconds: float
    thresholds: Thresholds
    targets: list[WatchEntry]
