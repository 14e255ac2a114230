"""Plain HTTP/1.1 over a transport's stream, so the server's port needs no route
from the control machine: health checks, metrics and probe traffic all travel
inside the SSH connection.

`timeout` is the total time of a request, from opening the stream to the last
byte of the body: every read is given only what is left of it, so a server
that answers one byte every few seconds cannot hold a request longer.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from orchestrator import remotejson
from orchestrator.deadline import Deadline
from orchestrator.errors import TransportError
from orchestrator.transport.base import Stream, Transport

MAX_BODY_BYTES = 16 << 20
"""Far above any /metrics or completion body; a reply beyond it is refused, not buffered."""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes

    def json(self) -> Any:
        return remotejson.loads(self.body)


class InFlight:
    """The streams of requests under way, so that another thread can end them at once.

    Closing a stream ends its request here and at the server: vLLM cancels a
    request whose client went away (`with_cancellation` on the completion and
    chat routes, `entrypoints/serve/utils/api_utils.py:51-93` in 0.32.0), so no
    engine time goes to an answer nobody reads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: set[Stream] = set()
        self.closed = False

    def add(self, stream: Stream) -> None:
        """Tracks a new stream; one opened after `close` is closed at once."""
        with self._lock:
            if not self.closed:
                self._streams.add(stream)
                return
        _end(stream)

    def discard(self, stream: Stream) -> None:
        with self._lock:
            self._streams.discard(stream)

    def close(self) -> None:
        """Ends every request under way and every one started from now on."""
        with self._lock:
            self.closed, streams = True, list(self._streams)
            self._streams.clear()
        for stream in streams:
            _end(stream)


def _end(stream: Stream) -> None:
    """Closed from another thread: a channel wakes its reader on close; a socket's reader
    blocked in recv wakes only on shutdown (the peer sees its end either way)."""
    if isinstance(stream, socket.socket):
        with contextlib.suppress(OSError):
            stream.shutdown(socket.SHUT_RDWR)
    stream.close()


class _DeadlineReader(io.RawIOBase):
    """Reads a stream, each read allowed only the time left before the deadline."""

    def __init__(self, stream: Stream, deadline: Deadline) -> None:
        self._stream, self._deadline = stream, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._deadline.remaining()
        if remaining <= 0:
            raise TimeoutError(f"no complete answer within {self._deadline.seconds:g} s")
        self._stream.settimeout(remaining)
        try:
            data = self._stream.recv(len(buffer))
        except TimeoutError:
            raise TimeoutError(f"no complete answer within {self._deadline.seconds:g} s") from None
        buffer[: len(data)] = data
        return len(data)


class _StreamConnection(http.client.HTTPConnection):
    def __init__(self, stream: Stream, host: str, port: int, deadline: Deadline) -> None:
        super().__init__(host, port)
        self._stream, self._deadline = stream, deadline

    def connect(self) -> None:
        self.sock = self

    def sendall(self, data: bytes) -> None:
        if self._deadline.expired():
            raise TimeoutError(f"no complete answer within {self._deadline.seconds:g} s")
        self._stream.settimeout(self._deadline.remaining())
        self._stream.sendall(data)

    def makefile(self, mode: str, bufsize: int = -1) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._stream, self._deadline))

    def close(self) -> None:
        """http.client closes early on `Connection: close`; a channel would lose the body.
        The stream is closed by `request` once the body is read."""
        self.sock = None


def request(
    transport: Transport,
    address: str,
    port: int,
    method: str,
    path: str,
    payload: Any = None,
    timeout: float = 30.0,
    headers: dict[str, str] | None = None,
    in_flight: InFlight | None = None,
) -> HttpResponse:
    """One request on a fresh stream, done within `timeout` seconds in all;
    connection refusal raises ServiceUnavailable. With `in_flight`, closing it
    ends the request (a TransportError)."""
    with _exchange(
        transport, address, port, method, path, payload, timeout, headers, in_flight
    ) as response:
        if (response.length or 0) > MAX_BODY_BYTES:
            raise http.client.HTTPException(f"a body of {response.length} bytes is too large")
        content = response.read() if response.length is not None else _read_bounded(response)
    return HttpResponse(response.status, content)


def stream_events(
    transport: Transport,
    address: str,
    port: int,
    path: str,
    payload: Any,
    on_data: Callable[[str], None],
    timeout: float = 30.0,
    headers: dict[str, str] | None = None,
    in_flight: InFlight | None = None,
) -> HttpResponse:
    """A POST whose 200 answer is server-sent events: `on_data` hears each event's
    `data:` payload as it arrives, the returned body is empty. Bounded as `request`
    is: `timeout` for the whole stream, MAX_BODY_BYTES in all; any other status
    returns its body."""
    with _exchange(
        transport, address, port, "POST", path, payload, timeout, headers, in_flight
    ) as response:
        if response.status != 200:
            return HttpResponse(response.status, _read_bounded(response))
        read = 0
        while line := response.readline(MAX_BODY_BYTES + 1 - read):
            read += len(line)
            if read > MAX_BODY_BYTES:
                raise http.client.HTTPException(
                    f"a stream of more than {MAX_BODY_BYTES} bytes is too large"
                )
            if line.startswith(b"data:"):
                on_data(line[5:].strip().decode("utf-8", "replace"))
    return HttpResponse(200, b"")


@contextlib.contextmanager
def _exchange(
    transport: Transport,
    address: str,
    port: int,
    method: str,
    path: str,
    payload: Any,
    timeout: float,
    headers: dict[str, str] | None,
    in_flight: InFlight | None,
) -> Iterator[http.client.HTTPResponse]:
    """A request sent on a fresh stream and its response, whose reading the caller does
    inside; the stream is closed after, and a failure anywhere is a TransportError."""
    deadline = Deadline.after(timeout)
    stream = transport.open_stream(address, port, timeout)
    if in_flight is not None:
        in_flight.add(stream)
    connection = _StreamConnection(stream, address, port, deadline)
    body = None if payload is None else json.dumps(payload).encode()
    headers = {**({"Content-Type": "application/json"} if body else {}), **(headers or {})}
    try:
        connection.request(method, path, body=body, headers=headers)
        yield connection.getresponse()
    except (OSError, EOFError, http.client.HTTPException) as exc:
        # EOFError: paramiko's packetizer when the SSH connection under the stream is gone
        raise TransportError(
            transport.label, f"{method} {path} on {address}:{port}", f"{type(exc).__name__}: {exc}"
        ) from None
    finally:
        connection.close()
        stream.close()
        if in_flight is not None:
            in_flight.discard(stream)


def _read_bounded(response: http.client.HTTPResponse) -> bytes:
    """A body of unannounced length (chunked, or until close), refused beyond the bound."""
    content = response.read(MAX_BODY_BYTES + 1)
    if len(content) > MAX_BODY_BYTES:
        raise http.client.HTTPException(f"a body of more than {MAX_BODY_BYTES} bytes is too large")
    return content
