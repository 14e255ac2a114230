"""A transport that writes every command it runs to the run's log.

It wraps the container's transport in the connection pool, the one place every
remote command of a run passes through, and changes nothing callers see: the
same result is returned and the same error raised, after the record is written.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from orchestrator.runlog import RunLog
from orchestrator.transport.base import Result, Stream, Transport


class RecordedTransport:
    def __init__(self, inner: Transport, container: str, log: RunLog) -> None:
        self.inner = inner
        self.label = inner.label
        self.container = container
        self.log = log

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        started = time.monotonic()
        try:
            result = self.inner.run(argv, stdin, timeout)
        except Exception as exc:
            self.log.command(self.container, argv, stdin, time.monotonic() - started, exc)
            raise
        outcome = (result.exit_code, result.stdout, result.stderr)
        self.log.command(self.container, argv, stdin, time.monotonic() - started, outcome)
        return result

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> Stream:
        """Health, metrics and probe traffic: not commands, not recorded."""
        return self.inner.open_stream(address, port, timeout)
