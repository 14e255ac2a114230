"""What a transport does: run an argv on a target, open a TCP stream from it.

Transports only move bytes. Policy (what to run, when to retry) lives with the
callers; lower-level errors become `TransportError` at the transport boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Result:
    """The outcome of one remote command."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def error_text(self) -> str:
        return self.stderr.decode("utf-8", "replace").strip()


class Stream(Protocol):
    """A connected byte stream (a socket or an SSH direct-tcpip channel)."""

    def sendall(self, data: bytes) -> None: ...
    def recv(self, size: int) -> bytes: ...
    def settimeout(self, timeout: float | None) -> None: ...
    def close(self) -> None: ...


class Transport(Protocol):
    """A way to reach one target: a Proxmox host, or a container on it."""

    label: str

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        """Run argv (no shell is implied) and wait for it; stdin is sent whole."""
        ...

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> Stream:
        """A TCP stream to address:port as seen from the target's side."""
        ...
