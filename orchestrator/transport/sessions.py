"""Session channels on one SSH connection: at most the host's MaxSessions at once.

OpenSSH's sshd refuses a connection's 11th concurrent session channel by
default (MaxSessions 10; docs/field-notes/ssh.md), so commands beyond the cap wait
here for a free slot instead of failing. Forwarded TCP streams are not
sessions and take no slot. The slots count their peak and how many commands
waited, so a run can say what queued.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

DEFAULT_MAX_SESSIONS = 10  # OpenSSH's MaxSessions (servconf.h DEFAULT_SESSIONS_MAX)


@dataclass(frozen=True)
class SessionUse:
    """What one connection's session slots saw during a run."""

    limit: int
    peak: int
    waited: int
    refused: int  # opens sshd refused and that were tried again


class SessionSlots:
    def __init__(self, limit: int = DEFAULT_MAX_SESSIONS) -> None:
        self.limit = limit
        self._free = threading.BoundedSemaphore(limit)
        self._count = threading.Lock()
        self._in_use = self._peak = self._waited = self._refused = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        """One slot for the block; waits (counted) while all are taken."""
        if not self._free.acquire(blocking=False):
            with self._count:
                self._waited += 1
            self._free.acquire()
        with self._count:
            self._in_use += 1
            self._peak = max(self._peak, self._in_use)
        try:
            yield
        finally:
            with self._count:
                self._in_use -= 1
            self._free.release()

    def refused(self) -> None:
        """sshd refused an open within the cap: it frees a closed session only after
        reading its close, which may come in the same read as the next open."""
        with self._count:
            self._refused += 1

    def use(self) -> SessionUse:
        with self._count:
            return SessionUse(self.limit, self._peak, self._waited, self._refused)
