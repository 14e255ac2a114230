"""Deadlines: the one notion of "how long" for a step and every call inside it (and
`now()`, the one notion of "when" that records write).

A step's budget (`ready_timeout`, the gate's `time_budget`, a step timeout)
becomes a `Deadline`; each remote command or HTTP request made for the step is
given `deadline.limit(cap)` as its `timeout=`, which transports treat as the
total time of the call, not the time between two reads. A peer that drips one
byte every few seconds therefore cannot stretch a step past its budget.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

MIN_CALL_SECONDS = 5.0
"""A call started just before the deadline still gets this long, so that the last look
(e.g. reading the log of a server that never became ready) can finish on a busy host:
a step ends within its budget plus this grace."""


class Clock(Protocol):
    """Where a wait reads the time and sleeps: the system's by default, a fake one in
    unit tests, so that no test waits for a budget to run out."""

    def now(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything)."""
        ...

    def sleep(self, seconds: float, wake: threading.Event) -> None:
        """Sleep `seconds`, or less once `wake` is set."""
        ...


class SystemClock:
    """Monotonic time and real sleeps."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float, wake: threading.Event) -> None:
        wake.wait(seconds)


SYSTEM_CLOCK = SystemClock()


@dataclass(frozen=True)
class Deadline:
    """A point in `clock`'s time by which a step must be done.

    `cancel` is the hook for stopping early: `pause` returns as soon as it is set.
    """

    at: float
    seconds: float
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)
    clock: Clock = field(default=SYSTEM_CLOCK, compare=False)

    @classmethod
    def after(
        cls, seconds: float, cancel: threading.Event | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> Deadline:
        return cls(clock.now() + seconds, seconds, cancel or threading.Event(), clock)

    def remaining(self) -> float:
        return max(0.0, self.at - self.clock.now())

    def expired(self) -> bool:
        return self.clock.now() >= self.at

    def limit(self, cap: float, floor: float = MIN_CALL_SECONDS) -> float:
        """The total time one call may take: what is left, at most `cap`, at least `floor`."""
        return min(cap, max(floor, self.remaining()))

    def pause(self, seconds: float) -> None:
        """Sleep `seconds`, never past the deadline, and no longer once cancelled."""
        self.clock.sleep(min(seconds, self.remaining()), self.cancel)


def now() -> str:
    """The time as every record writes it (UTC, ISO 8601, seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds")
