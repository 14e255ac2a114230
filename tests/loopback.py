"""The gate against the vLLM stand-in on loopback: a transport that opens real TCP
streams, the gate settings and context buckets the gate tests use."""

from __future__ import annotations

import socket
from collections.abc import Sequence

from standins import (
    RENDERED,
)

from orchestrator.drafters.kinds import get_kind
from orchestrator.playbook import Gate, Probe
from orchestrator.probes import load_passages, load_prompts
from orchestrator.probes.context import ContextBucket, context_buckets
from orchestrator.transport.base import Result

CAUSES = get_kind("dflash").failure_causes


class LoopbackTransport:
    """A real TCP stream to the stand-in; the gate only opens streams."""

    label = "loopback"

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        raise AssertionError("the gate runs no commands")

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> socket.socket:
        return socket.create_connection((address, port), timeout)


def buckets() -> list[ContextBucket]:
    return context_buckets(load_prompts("builtin"), load_passages(), RENDERED, 32768, 128)


def gate(source: str = "counters", **probe: object) -> Gate:
    settings = {
        "max_tokens": 128,
        "scrape_interval": 0.25,
        "chat_template_kwargs": {"enable_thinking": False},
        **probe,
    }
    return Gate(
        min_drafts=300,
        time_budget=60,
        acceptance_source=source,
        probe=Probe.model_validate(settings),
    )
