"""The live view of a deploy or rollback: a table of each container's step on a
terminal, one line per step (and a heartbeat during a long wait) elsewhere, and the
diffs printed as each release is written."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from rich.live import Live
from rich.table import Table

from orchestrator.report.screen import console, text, write_plain

if TYPE_CHECKING:
    pass


HEARTBEAT_SECONDS = 5.0


class DiffPrinter:
    """Each container's `diff -u` on stdout as soon as it is known, a whole block at a time
    (parallel containers never interleave), lines never wrapped or cut: plain text, or on
    a terminal above the live step view (the terminal folds long lines, nothing else)."""

    def __init__(self, view: StepView, as_json: bool) -> None:
        self.view = view
        self.enabled = not as_json  # with --json the document has the diffs
        # A live view redirects sys.stdout through itself; diffs go to the real one.
        self.stdout: TextIO = getattr(sys.stdout, "rich_proxied_file", sys.stdout)
        self.lock = threading.Lock()

    def __call__(self, container: str, diff: str) -> None:
        if not (diff and self.enabled):
            return
        with self.lock:
            live = self.view.live
            if live is not None and self.stdout.isatty():
                live.console.print(text(diff.rstrip("\n")), soft_wrap=True, highlight=False)
            else:
                write_plain(diff, self.stdout)


@dataclass
class _Step:
    step: str
    since: float  # when this kind of step began: a long wait counts as one
    detail: str = ""
    said: float = 0.0  # when a line about it was last printed (off a terminal)


class StepView:
    """Per-container current step, on stderr: a live table on a terminal; elsewhere
    one line per step and, during a long wait, a heartbeat line every few seconds.
    The gate's detail is its figures so far, a line a phase (drafts, mean, bound,
    required): rows of the table's last-seen cell, one line in a heartbeat."""

    def __init__(self, names: list[str], enabled: bool = True) -> None:
        self.out = console(stderr=True)
        self.enabled = enabled
        self.live_mode = enabled and self.out.is_terminal
        started = time.monotonic()
        self.steps = {n: _Step("waiting", started) for n in names}
        self.started = started
        self.live: Live | None = None
        self.lock = threading.Lock()

    def _table(self) -> Table:
        table = Table(box=None)
        table.add_column("CONTAINER", no_wrap=True)
        table.add_column("STEP")
        table.add_column("FOR", justify="right")
        table.add_column("LAST SEEN", no_wrap=True, overflow="ellipsis", max_width=90)
        for name, step in self.steps.items():
            since = f"{time.monotonic() - step.since:5.1f}s"
            table.add_row(text(name), text(step.step), since, text(step.detail))
        return table

    def __call__(self, name: str, step: str, detail: str = "") -> None:
        with self.lock:
            now = time.monotonic()
            previous = self.steps.get(name)
            # "wait ready (up to 120 s)" after "wait ready": the same wait goes on
            same = previous is not None and previous.step.split(" (")[0] == step.split(" (")[0]
            if previous is not None and same:
                previous.step, previous.detail = step, detail or previous.detail
                current = previous
            else:
                current = self.steps[name] = _Step(step, now, detail)
            if self.live:
                self.live.update(self._table())
            elif self.enabled and not same:
                self._say(now, f"{name}: {step}")
                current.said = now
            elif self.enabled and now - current.said >= HEARTBEAT_SECONDS:
                # a detail of several lines (the gate's phases) is one line in a pipe
                seen = "; " + current.detail.replace("\n", "; ") if current.detail else ""
                self._say(now, f"{name}: {step}, {now - current.since:.0f} s so far{seen}")
                current.said = now

    def _say(self, now: float, line: str) -> None:
        self.out.print(text(f"{now - self.started:6.1f}s {line}"), highlight=False)

    def describe(self) -> str:
        """What each container is doing now, for a message while it finishes."""
        with self.lock:
            return "; ".join(f"{name}: {step.step}" for name, step in self.steps.items())

    def __enter__(self) -> StepView:
        if self.live_mode:
            self.live = Live(
                self._table(),
                console=self.out,
                refresh_per_second=4,
                get_renderable=self._table,
                transient=True,
                redirect_stdout=False,  # stdout is for results; the view is on stderr
            )
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.__exit__(None, None, None)
