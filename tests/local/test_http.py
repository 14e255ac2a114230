"""HTTP over a transport's stream: a request's timeout is its whole time.

A real loopback server answers; the transport under test opens plain sockets to it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from loopback import LoopbackTransport

from orchestrator.deadline import Deadline
from orchestrator.errors import TransportError
from orchestrator.transport import http

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


class Server:
    """Answers each connection with `response`, one byte every `drip` seconds."""

    def __init__(self, response: bytes, drip: float = 0.0) -> None:
        self.response, self.drip = response, drip
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(0.1)
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.recv(65536)
                try:
                    if not self.drip:
                        connection.sendall(self.response)
                    for byte in self.response if self.drip else b"":
                        if self.stop.wait(self.drip):
                            break
                        connection.sendall(bytes([byte]))
                except OSError:
                    continue

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.listener.close()


@pytest.fixture
def serve() -> Iterator[list[Server]]:
    servers: list[Server] = []
    yield servers
    for server in servers:
        server.close()


def get(server: Server, timeout: float) -> http.HttpResponse:
    return http.request(
        LoopbackTransport(), "127.0.0.1", server.port, "GET", "/health", timeout=timeout
    )


def test_a_prompt_answer_is_read_whole(serve: list[Server]) -> None:
    serve.append(server := Server(RESPONSE))
    assert get(server, timeout=5) == http.HttpResponse(200, b"ok")


def test_an_answer_dripping_within_the_timeout_is_read(serve: list[Server]) -> None:
    serve.append(server := Server(RESPONSE, drip=0.005))
    assert get(server, timeout=30) == http.HttpResponse(200, b"ok")


def test_an_answer_dripping_past_the_timeout_is_cut_at_the_timeout(serve: list[Server]) -> None:
    """Each byte comes well within the timeout; the whole answer would take 24 s."""
    serve.append(server := Server(RESPONSE, drip=0.3))
    with pytest.raises(TransportError, match=r"GET /health .*no complete answer within 1 s"):
        get(server, timeout=1)


def test_a_body_beyond_the_bound_is_refused(serve: list[Server]) -> None:
    size = http.MAX_BODY_BYTES + 1
    serve.append(server := Server(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode()))
    with pytest.raises(TransportError, match="too large"):
        get(server, timeout=5)


def test_a_deadline_limits_each_call_with_a_floor() -> None:
    deadline = Deadline.after(100)
    assert 99 < deadline.limit(1000) <= 100
    assert deadline.limit(3) == 3
    spent = Deadline.after(0)
    assert spent.expired() and spent.remaining() == 0
    assert spent.limit(30) == 5 and spent.limit(30, floor=0.1) == 0.1


def test_a_pause_ends_when_cancelled() -> None:
    cancel = threading.Event()
    deadline = Deadline.after(60, cancel)
    threading.Timer(0.05, cancel.set).start()
    started = time.monotonic()
    deadline.pause(60)
    assert cancel.is_set() and time.monotonic() - started < 60


class LostConnectionStream:
    """A stream over an SSH connection that is gone: paramiko's packetizer raises
    EOFError on the next write."""

    def settimeout(self, timeout: float | None) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        raise EOFError

    def recv(self, size: int) -> bytes:
        raise EOFError

    def close(self) -> None:
        pass


class LostConnectionTransport(LoopbackTransport):
    label = "ct200"

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> Any:
        return LostConnectionStream()


def test_a_lost_ssh_connection_is_a_transport_error_not_a_traceback() -> None:
    with pytest.raises(TransportError, match=r"GET /metrics on 127.0.0.1:8000.*EOFError"):
        http.request(LostConnectionTransport(), "127.0.0.1", 8000, "GET", "/metrics", timeout=5)
