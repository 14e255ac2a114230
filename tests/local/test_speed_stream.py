"""Streamed completions over a real loopback HTTP server: server-sent events heard as they
arrive, within the request's deadline and size bound, and the gate's speed levels timed
from them on a server whose token pace and running batch are known."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from loopback import LoopbackTransport

from orchestrator.deadline import Deadline
from orchestrator.errors import TransportError
from orchestrator.gate.probe import Target
from orchestrator.gate.speed import SpeedTraffic, measure_speed
from orchestrator.playbook_speed import Speed
from orchestrator.transport import http

TOKENS = 11
FIRST_TOKEN_SECONDS = 0.05
TOKEN_SECONDS = 0.02
"""The server's pace: a token every 0.02 s after the first, so 50 tokens/s per stream."""


class Vllm(BaseHTTPRequestHandler):
    """Streams completions as vLLM does (chunked, one text chunk a token, then the usage
    chunk and [DONE]); /metrics reports the requests it is streaming plus `foreign`."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        running = self.server.streaming + self.server.foreign
        body = f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running {running}\n"
        self._send(200, body.encode(), "text/plain")

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not request.get("stream"):
            self._send(400, b'{"error": "stream only"}', "application/json")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with self.server.lock:
            self.server.streaming += 1
        try:
            time.sleep(FIRST_TOKEN_SECONDS)
            for index in range(TOKENS):
                if index:
                    time.sleep(TOKEN_SECONDS)
                self._event({"choices": [{"index": 0, "text": f" t{index}"}]})
            self._event({"choices": [], "usage": {"completion_tokens": TOKENS}})
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except OSError:
            pass  # the client went away: a cancelled request
        finally:
            with self.server.lock:
                self.server.streaming -= 1

    def _event(self, chunk: dict[str, Any]) -> None:
        self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def vllm() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Vllm)
    server.daemon_threads = True
    server.streaming, server.foreign, server.lock = 0, 0, threading.Lock()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def stream(server: ThreadingHTTPServer, timeout: float) -> list[tuple[float, str]]:
    heard: list[tuple[float, str]] = []
    started = time.monotonic()
    response = http.stream_events(
        LoopbackTransport(),
        "127.0.0.1",
        server.server_address[1],
        "/v1/completions",
        {"model": "m", "stream": True},
        lambda data: heard.append((time.monotonic() - started, data)),
        timeout=timeout,
    )
    assert response == http.HttpResponse(200, b"")
    return heard


def test_events_are_heard_as_they_arrive(vllm: ThreadingHTTPServer) -> None:
    heard = stream(vllm, timeout=10)
    assert [data for _, data in heard][-1] == "[DONE]"
    assert len(heard) == TOKENS + 2
    first, last = heard[0][0], heard[TOKENS - 1][0]
    assert first >= FIRST_TOKEN_SECONDS
    assert last - first >= (TOKENS - 1) * TOKEN_SECONDS  # not buffered to the end


def test_a_stream_past_its_timeout_is_cut_at_the_timeout(vllm: ThreadingHTTPServer) -> None:
    with pytest.raises(TransportError, match=r"no complete answer within 0\.1 s"):
        stream(vllm, timeout=0.1)


def test_a_stream_beyond_the_bound_is_refused(
    vllm: ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "MAX_BODY_BYTES", 200)
    with pytest.raises(TransportError, match="too large"):
        stream(vllm, timeout=10)


def test_a_refused_stream_returns_its_status_and_body(vllm: ThreadingHTTPServer) -> None:
    response = http.stream_events(
        LoopbackTransport(), "127.0.0.1", vllm.server_address[1], "/v1/completions", {}, print
    )
    assert response == http.HttpResponse(400, b'{"error": "stream only"}')


def measure(server: ThreadingHTTPServer, speed: Speed) -> Any:
    target = Target(LoopbackTransport(), "127.0.0.1", server.server_address[1], "m")
    traffic = SpeedTraffic(("hello",), TOKENS, {"temperature": 0.0})
    return measure_speed(target, speed, traffic, 0.95, Deadline.after(60))


def test_speed_levels_time_the_servers_pace_and_read_its_batch(vllm: ThreadingHTTPServer) -> None:
    report = measure(vllm, Speed(concurrency=[1, 3], max_requests=30, precision=0.1))
    assert report.streamed
    assert [level.concurrency for level in report.levels] == [1, 3]
    for level in report.levels:
        per_stream = level.per_stream_tokens_per_second
        assert per_stream is not None and per_stream.lower is not None
        # 50 tokens/s at the server's pace, a little less for the wire and the threads
        assert 25 < per_stream.mean <= 1 / TOKEN_SECONDS * 1.05
        total = level.total_tokens_per_second
        assert total is not None
        request_seconds = FIRST_TOKEN_SECONDS + (TOKENS - 1) * TOKEN_SECONDS
        assert total.mean <= level.concurrency * TOKENS / request_seconds * 1.05
        assert level.time_to_first_token is not None
        assert level.time_to_first_token >= FIRST_TOKEN_SECONDS
        assert level.foreign_share == 0.0
        assert level.batch_measured is not None and level.batch_measured <= level.concurrency
        assert 2 * level.concurrency <= level.requests < 30  # stopped once precise enough
    assert report.requests == 1 + sum(lv.requests + lv.request_errors for lv in report.levels)


def test_other_clients_requests_show_as_the_batchs_foreign_share(
    vllm: ThreadingHTTPServer,
) -> None:
    vllm.foreign = 2  # type: ignore[attr-defined]
    report = measure(vllm, Speed(concurrency=[2], max_requests=8))
    (level,) = report.levels
    assert level.foreign_share is not None and level.foreign_share >= 0.4
