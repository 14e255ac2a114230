"""One /metrics read for the gate: retried within a deadline, garbage refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import tenacity

from orchestrator.deadline import Deadline
from orchestrator.errors import OrchError
from orchestrator.metrics.scrape import (
    ACCEPT,
    RUNNING,
    MetricsFormatError,
    SpecDecodeCounters,
    parse_running,
    parse_spec_decode,
)
from orchestrator.transport import http
from orchestrator.transport.base import Transport

SCRAPE_ATTEMPTS = 3
SCRAPE_SECONDS = 15.0
Parsed = TypeVar("Parsed")


class ScrapeFailed(Exception):
    """/metrics could not be read or parsed: could not measure, not measured bad."""


def scrape(
    transport: Transport, address: str, port: int, deadline: Deadline
) -> SpecDecodeCounters | None:
    """The server's speculative-decoding counters (None: it exposes none)."""
    return _parsed(parse_spec_decode, read_metrics(transport, address, port, deadline))


def scrape_running(transport: Transport, address: str, port: int, deadline: Deadline) -> int:
    """The requests in the server's running batch now; a server without the gauge is a
    ScrapeFailed (the batch cannot be known)."""
    running = _parsed(parse_running, read_metrics(transport, address, port, deadline))
    if running is None:
        raise ScrapeFailed(f"/metrics has no {RUNNING}")
    return running


def read_metrics(transport: Transport, address: str, port: int, deadline: Deadline) -> str:
    """One /metrics read, retried on transport errors within the deadline; a failure
    to read is a ScrapeFailed."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(OrchError),
        wait=tenacity.wait_exponential(multiplier=0.1, max=1.0),
        stop=lambda state: state.attempt_number >= SCRAPE_ATTEMPTS or deadline.expired(),
        sleep=deadline.pause,
        reraise=True,
    )
    try:
        response = retrying(
            lambda: http.request(
                transport,
                address,
                port,
                "GET",
                "/metrics",
                timeout=deadline.limit(SCRAPE_SECONDS),
                headers={"Accept": ACCEPT},
            )
        )
    except OrchError as exc:
        raise ScrapeFailed(str(exc)) from None
    if response.status != 200:
        raise ScrapeFailed(f"/metrics answered HTTP {response.status}")
    return response.body.decode("utf-8", "replace")


def _parsed(parse: Callable[[str], Parsed], text: str) -> Parsed:
    """Garbage is a ScrapeFailed."""
    try:
        return parse(text)
    except MetricsFormatError as exc:
        raise ScrapeFailed(f"/metrics could not be read as counters: {exc}") from None
