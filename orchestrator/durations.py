"""Spans of time as people type them: `90s`, `5m`, `1h30m`, `2d`, or plain seconds;
points in time given as a span ago or as a date; a time as people read it,
`3m ago`; and seconds as documents give them."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import PlainSerializer

from orchestrator.errors import InputError

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
SPAN = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d|w))+$")
PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d|w)")

Seconds = Annotated[float, PlainSerializer(lambda seconds: round(seconds, 3))]
"""A span measured here: documents give it to the millisecond, the clock's noise cut."""


def seconds(text: str, option: str) -> float:
    """`text` as seconds; a bare number is seconds. Zero or less is refused."""
    value = text.strip()
    try:
        total = float(value)
    except ValueError:
        if not SPAN.match(value):
            raise InputError(
                f"{option} {text!r}: expected seconds or a span such as 30s, 5m, 1h30m, 2d"
            ) from None
        total = sum(float(n) * UNITS[unit] for n, unit in PART.findall(value))
    if not total > 0:
        raise InputError(f"{option} {text!r}: must be more than zero")
    return total


def since(text: str, option: str, now: datetime | None = None) -> datetime:
    """A point in time: a span ago (`2h`, `7d`) or an ISO date or time (UTC unless it
    says otherwise)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        try:
            span = seconds(text, option)
        except InputError:
            raise InputError(
                f"{option} {text!r}: expected a span ago (30m, 2h, 7d) or a date "
                "(2026-12-01, 2026-12-01T08:00)"
            ) from None
        return (now or datetime.now(UTC)) - timedelta(seconds=span)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def ago(iso_time: str | float, now: float | None = None) -> str:
    """`3m ago` for a time given as ISO 8601 or seconds since the epoch."""
    then = (
        iso_time
        if isinstance(iso_time, float | int)
        else datetime.fromisoformat(iso_time).astimezone(UTC).timestamp()
    )
    elapsed = max(0, int((now if now is not None else time.time()) - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if elapsed >= size:
            return f"{elapsed // size}{unit} ago"
    return f"{elapsed}s ago"
