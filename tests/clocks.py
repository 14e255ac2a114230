"""A clock for unit tests: time moves only when a wait sleeps on it, so a budget of
minutes runs out in a blink and a stop request lands at a chosen moment."""

from __future__ import annotations

import threading
from collections.abc import Callable

SETTLE_SECONDS = 0.005
"""How long a sleeper waits for the clock's other threads to go to sleep before it moves
the clock on anyway (one may be busy outside the clock, in a join, say)."""


class FakeClock:
    """`orchestrator.deadline.Clock` in memory: a sleep wakes at the time it asked for,
    and the clock moves to the earliest pending wake-up once every thread that reads it
    is asleep on it, so several threads' waits overlap as they would in real time. The
    alarms that fall due on the way run (`at`)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.time = start
        self.slept = 0.0
        """Every second slept so far, by every waiter."""
        self._alarms: list[tuple[float, Callable[[], None]]] = []
        self._readers: set[threading.Thread] = set()
        self._asleep: dict[threading.Thread, float] = {}
        self._moved = threading.Condition()

    def now(self) -> float:
        with self._moved:
            self._readers.add(threading.current_thread())
            return self.time

    def sleep(self, seconds: float, wake: threading.Event) -> None:
        if wake.is_set():
            return
        me = threading.current_thread()
        due: list[tuple[float, Callable[[], None]]] = []
        with self._moved:
            self._readers.add(me)
            until = self.time + max(0.0, seconds)
            self.slept += max(0.0, seconds)
            self._asleep[me] = until
            try:
                while self.time < until and not wake.is_set():
                    if self._earliest(me) and (
                        self._all_asleep() or not self._moved.wait(SETTLE_SECONDS)
                    ):
                        due = self._move_to(until)
                        break
                    if not self._earliest(me):
                        self._moved.wait(SETTLE_SECONDS)
            finally:
                del self._asleep[me]
        for _, action in sorted(due, key=lambda alarm: alarm[0]):
            action()

    def _earliest(self, me: threading.Thread) -> bool:
        return self._asleep[me] <= min(self._asleep.values())

    def _all_asleep(self) -> bool:
        self._readers = {thread for thread in self._readers if thread.is_alive()}
        return self._readers <= self._asleep.keys()

    def _move_to(self, until: float) -> list[tuple[float, Callable[[], None]]]:
        """The clock at `until`, the sleepers told; the alarms now due (under the lock)."""
        self.time = max(self.time, until)
        due = [alarm for alarm in self._alarms if alarm[0] <= self.time]
        self._alarms = [alarm for alarm in self._alarms if alarm[0] > self.time]
        self._moved.notify_all()
        return due

    def after(self, seconds: float, action: Callable[[], None]) -> None:
        """Run `action` once a sleep carries the clock `seconds` past now."""
        with self._moved:
            self._alarms.append((self.time + seconds, action))
