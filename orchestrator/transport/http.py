"""Plain HTTP/1.1 over a transport's stream, so the server's port needs no route
from the control machine: health checks, metrics and probe traffic all travel
inside the SSH connection."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import TransportError
from orchestrator.transport.base import Stream, Transport


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class _StreamConnection(http.client.HTTPConnection):
    def __init__(self, stream: Stream, host: str, port: int) -> None:
        super().__init__(host, port)
        self._stream = stream

    def connect(self) -> None:
        self.sock = self._stream

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
) -> HttpResponse:
    """One request on a fresh stream; connection refusal raises ServiceUnavailable."""
    stream = transport.open_stream(address, port, timeout)
    connection = _StreamConnection(stream, address, port)
    body = None if payload is None else json.dumps(payload).encode()
    headers = {**({"Content-Type": "application/json"} if body else {}), **(headers or {})}
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return HttpResponse(response.status, response.read())
    except (OSError, http.client.HTTPException) as exc:
        raise TransportError(
            transport.label, f"{method} {path} on {address}:{port}", f"{type(exc).__name__}: {exc}"
        ) from None
    finally:
        connection.close()
        stream.close()
