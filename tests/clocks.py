"""A clock for unit tests: time moves only when a wait sleeps on it, so a budget of
minutes runs out in a blink and a stop request lands at a chosen moment."""

from __future__ import annotations

import threading
from collections.abc import Callable


class FakeClock:
    """`orchestrator.deadline.Clock` in memory: `sleep` moves `now` on at once and runs
    the alarms that fall due on the way (`at`)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.time = start
        self.slept = 0.0
        """Every second slept so far, by every waiter."""
        self._alarms: list[tuple[float, Callable[[], None]]] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self.time

    def sleep(self, seconds: float, wake: threading.Event) -> None:
        if wake.is_set():
            return
        with self._lock:
            self.time += max(0.0, seconds)
            self.slept += max(0.0, seconds)
            due = [alarm for alarm in self._alarms if alarm[0] <= self.time]
            self._alarms = [alarm for alarm in self._alarms if alarm[0] > self.time]
        for _, action in sorted(due, key=lambda alarm: alarm[0]):
            action()

    def after(self, seconds: float, action: Callable[[], None]) -> None:
        """Run `action` once a sleep carries the clock `seconds` past now."""
        with self._lock:
            self._alarms.append((self.time + seconds, action))
