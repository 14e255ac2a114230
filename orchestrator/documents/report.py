"""The document of `orch report RUN --json`: one run as the report shows it, as data:
the run as the local history recorded it, and when each container took each step (the
run's log on this machine). The Markdown and HTML pages (report/runpage.py) are built
from it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from orchestrator import runlog
from orchestrator.contract import Document, RunResult
from orchestrator.documents.history import RecordedRun, in_todays_words
from orchestrator.errors import InputError


class TimedStep(BaseModel):
    """A step one container took, when the run's log says it began it (UTC)."""

    name: str
    time: str
    step: str


class Report(Document):
    kind: Literal["Report"] = "Report"
    result: RunResult = "ok"
    run: RecordedRun
    """The run as `orch history --json` lists it."""
    log: str | None
    """The run's log on this machine; None once it was pruned (then `steps` is empty)."""
    steps: list[TimedStep]
    """In the order the log has them."""

    @classmethod
    def of(cls, recorded: RecordedRun) -> Report:
        """The run as the history recorded it, and its log's steps."""
        run = in_todays_words(recorded)
        try:
            log = runlog.read(run.run_id)
        except InputError:
            return cls(run=run, log=None, steps=[])
        return cls(run=run, log=str(log.path), steps=timed_steps(log.lines))

    def timeline(self, name: str) -> list[TimedStep]:
        """The steps of one container, in order."""
        return [step for step in self.steps if step.name == name]


def timed_steps(lines: list[str]) -> list[TimedStep]:
    """The step lines of a run's log (`TIME RUN CONTAINER step: TEXT`)."""
    steps = []
    for line in lines:
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[3].startswith("step: "):
            steps.append(TimedStep(name=parts[2], time=parts[0], step=parts[3][len("step: ") :]))
    return steps
