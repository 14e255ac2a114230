"""How a transaction ends on its container when it does not finish: refused with
nothing changed, interrupted before the switch, or failed; each turned into the
container's outcome, so no exception leaves a container's run (an unforeseen one
too: the run's record, history and exit code still say what happened)."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.errors import Interrupted, OrchError
from orchestrator.transaction.outcome import Outcome


class Refused(Exception):
    """The run stops on this container with nothing changed (or nothing more)."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code, self.message = exit_code, message


def guard(out: Outcome, body: Callable[[], None]) -> Outcome:
    """The outcome, whatever ended the run on this container."""
    try:
        body()
    except Refused as stop:
        out.exit_code, out.error = stop.exit_code, stop.message
    except Interrupted as exc:
        out.result, out.exit_code = "interrupted", exc.exit_code
        out.error = "interrupted before the switch: nothing was changed"
        out.current = out.previous_release
    except OrchError as exc:
        out.exit_code, out.error, out.result = exc.exit_code, exc.message_for(out.name), "failed"
    except Exception as exc:  # the run's boundary: every end is an outcome
        out.exit_code, out.result = 3, "failed"
        out.error = (
            f"stopped by an unexpected {type(exc).__name__}: {exc}; an interrupted switch "
            "is recovered by the next run on this container"
        )
    return out
