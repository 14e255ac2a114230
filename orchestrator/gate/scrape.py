"""One /metrics read for the gate: retried within a deadline, garbage refused."""

from __future__ import annotations

import tenacity

from orchestrator.deadline import Deadline
from orchestrator.errors import OrchError
from orchestrator.metrics.scrape import (
    ACCEPT,
    MetricsFormatError,
    SpecDecodeCounters,
    parse_spec_decode,
)
from orchestrator.transport import http
from orchestrator.transport.base import Transport

SCRAPE_ATTEMPTS = 3
SCRAPE_SECONDS = 15.0


class ScrapeFailed(Exception):
    """/metrics could not be read or parsed: could not measure, not measured bad."""


def scrape(
    transport: Transport, address: str, port: int, deadline: Deadline
) -> SpecDecodeCounters | None:
    """One /metrics read, retried on transport errors within the deadline; garbage is a
    ScrapeFailed."""
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
    try:
        return parse_spec_decode(response.body.decode("utf-8", "replace"))
    except MetricsFormatError as exc:
        raise ScrapeFailed(f"/metrics is not Prometheus text: {exc}") from None
