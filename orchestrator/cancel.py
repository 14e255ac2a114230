"""Stopping a run on SIGINT or SIGTERM at its next safe point.

The first signal sets a shared event that every worker checks between steps
and waits on in its loops (the ready wait, the gate's probe loop, backoff
sleeps); a container whose new release is not yet gated goes back to its
previous one. A second signal only says what is being finished: the undo is
never abandoned halfway.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from orchestrator.errors import Interrupted


class Cancel:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None

    def request(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def check(self) -> None:
        """A safe point: stop here if the run was told to stop."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or 0)


@contextmanager
def on_signals(
    cancel: Cancel, say: Callable[[str], None], finishing: Callable[[], str]
) -> Iterator[Cancel]:
    """SIGINT and SIGTERM request a stop instead of raising in the main thread."""

    def handle(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if cancel.requested:
            say(f"{name} again: still finishing {finishing()}; it will not be abandoned")
        else:
            say(f"{name}: stopping at the next safe point; undoing what was not gated")
        cancel.request(signum)

    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield cancel
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
