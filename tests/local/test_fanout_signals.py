"""A stop signal while a run fans out over its targets, with real signals and threads:
the kernel may hand a process's signal to any thread, CPython runs its handler in the
main thread only, so the caller of `fan_out` must run it while the targets still run."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import pytest

from orchestrator.fanout import LOOK_SECONDS, fan_out

WORK_SECONDS = 10.0
"""How long a target waits for the handler: far past a look."""


@pytest.fixture
def handled() -> Iterator[threading.Event]:
    """Set by SIGUSR1's handler (which runs in the main thread)."""
    event = threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda *_: event.set())
    yield event
    signal.signal(signal.SIGUSR1, previous)


def test_a_signal_a_worker_thread_takes_is_handled_while_the_targets_run(
    handled: threading.Event,
) -> None:
    def one(name: str) -> float:
        time.sleep(0.5)  # the caller is in its wait for the results by now
        sent = time.monotonic()
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # this worker takes it
        assert handled.wait(WORK_SECONDS), "the handler waited for the targets to end"
        return time.monotonic() - sent

    group = fan_out(["ct200"], one, 1)

    assert group.succeeded["ct200"] < LOOK_SECONDS + 1.0
