"""Running built commands on a target: one place that turns a non-zero exit
into an error naming the target and the step."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.errors import StepFailed
from orchestrator.transport.base import Result, Transport

DEFAULT_TIMEOUT = 120.0


def run_step(
    transport: Transport,
    argv: Sequence[str],
    step: str,
    stdin: bytes | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Result:
    result = transport.run(argv, stdin, timeout)
    if not result.ok:
        detail = result.error_text or result.text.strip() or "no output"
        raise StepFailed(
            f"{step}: exit {result.exit_code}: {detail[-800:]}", subject=transport.label
        )
    return result
