"""A transport held in memory: scripted replies, every call recorded.

For fast unit tests beside the lab tests. A command is answered by concern: the
newest rule for the name of the builder that made it (a container command says
which, as `argv.concern`, with its arguments in `argv.args`), or for the first
word of a plain argv, or `ANY`; first, as the script would, the checks of its stdin the
command carries (`argv.checks`, shell.WholeStdin) refuse what they refuse. A reply
may be computed from the argv and stdin, so a test can keep a container's state in
memory (tests/scripted.py does). TCP streams carry HTTP/1.1 to handlers keyed by method and path.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from orchestrator.errors import ServiceUnavailable
from orchestrator.transport.base import Result

Reply = Callable[[Sequence[str], bytes | None], Result]
ANY = "*"
"""The rule for any command."""
HttpHandler = Callable[[bytes], tuple[int, "bytes | Iterable[bytes]"]]
"""request body -> (status, body); a body given in pieces is sent chunked, each piece
made only when the client reads that far (a stream that takes its time)."""


@dataclass
class Call:
    argv: tuple[str, ...]
    stdin: bytes | None

    @property
    def text(self) -> str:
        return " ".join(self.argv)


def concern_of(argv: Sequence[str]) -> str:
    """The builder that made `argv`, else its first word."""
    return str(getattr(argv, "concern", "") or (argv[0] if argv else ""))


def reply(stdout: str | bytes = b"", exit_code: int = 0, stderr: bytes = b"") -> Reply:
    """A fixed answer."""
    out = stdout.encode() if isinstance(stdout, str) else stdout
    return lambda argv, _stdin: Result(tuple(argv), exit_code, out, stderr)


@dataclass
class MemoryTransport:
    label: str = "memory"
    rules: list[tuple[str, Reply]] = field(default_factory=list)
    http: dict[tuple[str, str], HttpHandler] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, concern: str, answer: Reply) -> MemoryTransport:
        self.rules.append((concern, answer))
        return self

    def on_http(self, method: str, path: str, handler: HttpHandler) -> MemoryTransport:
        self.http[(method, path)] = handler
        return self

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        call = Call(tuple(argv), stdin)
        with self._lock:
            self.calls.append(call)
        for check in getattr(argv, "checks", ()):
            if refused := check.refusal(stdin or b""):
                return Result(tuple(argv), 1, b"", refused.encode())
        concern = concern_of(argv)
        for rule, answer in reversed(self.rules):
            if rule in (concern, ANY):
                return answer(argv, stdin)
        raise AssertionError(f"{self.label}: no scripted reply for {concern}: {call.text[:300]!r}")

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> MemoryStream:
        if not self.http:
            raise ServiceUnavailable(self.label, f"connect {address}:{port}", "refused")
        return MemoryStream(self)

    def _answer(self, request: bytes) -> Iterator[bytes]:
        head, _, body = request.partition(b"\r\n\r\n")
        method, path, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
        with self._lock:
            self.requests.append((method, path))
        handler = self.http.get((method, path))
        status, payload = handler(body) if handler else (404, b"not found")
        if isinstance(payload, bytes):
            yield f"HTTP/1.1 {status} X\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
            yield payload
            return
        yield f"HTTP/1.1 {status} X\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        for piece in payload:
            yield f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        yield b"0\r\n\r\n"


class MemoryStream:
    """The request is buffered until the client reads; then the handler answers, a piece
    at a time as the client reads on."""

    def __init__(self, transport: MemoryTransport) -> None:
        self.transport = transport
        self.sent = b""
        self._pieces: Iterator[bytes] | None = None
        self._piece = io.BytesIO()

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def recv(self, size: int) -> bytes:
        if self._pieces is None:
            self._pieces = self.transport._answer(self.sent)
        while not (data := self._piece.read(size)):
            piece = next(self._pieces, None)
            if piece is None:
                return b""
            self._piece = io.BytesIO(piece)
        return data

    def settimeout(self, timeout: float | None) -> None:
        return None

    def close(self) -> None:
        return None
