"""A run's connections to one SSH endpoint: one, and more while commands queue on it.

A command goes to the first open connection with a free session (MaxSessions each,
sessions.py). When every session of every open connection is taken, another connection
is opened, one at a time and up to the host's share of its MaxStartups (startups.py);
beyond that, commands queue for the first session freed. A further connection the host
does not take is not tried again in the run: its command queues instead. Forwarded
streams take no session: a stream goes to the first connection with a free stream
(MAX_STREAMS each, ssh.py), to another connection when every open one is full (as a
command would get one), else it waits on the first for a stream freed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from orchestrator.transport.base import Result, Stream
from orchestrator.transport.login import Login
from orchestrator.transport.sessions import DEFAULT_MAX_SESSIONS, SessionUse
from orchestrator.transport.ssh import SshTransport
from orchestrator.transport.startups import (
    OPENSSH_STARTUPS,
    Startups,
    most_connections,
    open_another,
)


class SshEndpoint:
    def __init__(
        self, label: str, address: str, settings: Login, accept_new_host_keys: bool = False
    ) -> None:
        self.label, self.address, self.settings = label, address, settings
        self.accept_new_host_keys = accept_new_host_keys
        self.max_sessions = settings.max_sessions or DEFAULT_MAX_SESSIONS
        startups = settings.max_startups
        self.most = most_connections(Startups.parse(startups) if startups else OPENSSH_STARTUPS)
        self._changed = threading.Condition()
        self._connections: list[SshTransport] = []
        self._busy: list[int] = []  # sessions taken, per connection
        self._opening = False
        self._in_use = self._peak = self._waited = 0

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        """argv on a connection with a free session (its timeout starts there)."""
        index = self._take()
        try:
            return self._connections[index].run(argv, stdin, timeout)
        finally:
            with self._changed:
                self._busy[index] -= 1
                self._in_use -= 1
                self._changed.notify()

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> Stream:
        return self._for_stream().open_stream(address, port, timeout)

    def _for_stream(self) -> SshTransport:
        """The first open connection with a free stream; else a new one, when
        `open_another` says so (every open one's streams taken); else the first one,
        whose open waits for a freed stream."""
        while True:
            with self._changed:
                free = next((c for c in self._connections if c.stream_free()), None)
                if free is not None:
                    return free
                if self._opening:  # every stream taken, a connection on its way: wait for it
                    self._changed.wait()
                    continue
                if not open_another(0, len(self._connections), False, self.most):
                    return self._connections[0]
                self._opening = True
            try:
                return self._add()
            except Exception:
                if not self._connections:
                    raise  # the host cannot be reached at all: the stream's own error

    def _take(self) -> int:
        """The index of a connection one of whose sessions is now this command's: a free
        one, or a new connection when `open_another` says so, or the first one freed."""
        counted = False
        while True:
            with self._changed:
                free = sum(self.max_sessions - busy for busy in self._busy)
                if open_another(free, len(self._connections), self._opening, self.most):
                    self._opening = True
                elif free:
                    index = next(i for i, b in enumerate(self._busy) if b < self.max_sessions)
                    return self._taken(index)
                else:
                    if not (counted or self._opening):  # a wait for a login is no queue
                        self._waited, counted = self._waited + 1, True
                    self._changed.wait()
                    continue
            try:
                self._add()
            except Exception:
                if not self._connections:
                    raise  # the host cannot be reached at all: the command's own error
            # then a session on the new connection, or on any, or the wait for one

    def _taken(self, index: int) -> int:
        self._busy[index] += 1
        self._in_use += 1
        self._peak = max(self._peak, self._in_use)
        return index

    def _add(self) -> SshTransport:
        """A new connection, logged in, appended (called with `_opening` set by this
        thread). When a further one fails, no other is tried: `most` becomes what is open."""
        connection = SshTransport(
            self.label, self.address, self.settings, self.accept_new_host_keys
        )
        try:
            connection.connect()
        except BaseException:
            connection.close()
            with self._changed:
                self._opening = False
                if self._connections:
                    self.most = len(self._connections)
                self._changed.notify_all()
            raise
        with self._changed:
            self._connections.append(connection)
            self._busy.append(0)
            self._opening = False
            self._changed.notify_all()
        return connection

    def use(self) -> SessionUse:
        """Sessions over all its connections: the peak taken at once, the commands that
        queued, the opens sshd refused (and that were tried again)."""
        with self._changed:
            refused = sum(c.sessions.use().refused for c in self._connections)
            return SessionUse(self.max_sessions, self._peak, self._waited, refused)

    @property
    def connections(self) -> int:
        with self._changed:
            return len(self._connections)

    def close(self) -> None:
        with self._changed:
            connections = list(self._connections)
        for connection in connections:
            connection.close()
