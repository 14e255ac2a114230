"""`orch status --wait`: status read again until no run is at work on the selected
containers and no server is still coming up (none `deploying` or `unhealthy`), as
kubectl's `rollout status` waits for a rollout; then the status as it stands, with its
exit code. A wait that runs out of time needs attention (exit 3); one stopped by a
signal is interrupted."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.connections import SSH, Connect
from orchestrator.contract import TargetState, run_result
from orchestrator.deadline import Deadline
from orchestrator.documents.fleet import Status, StatusTarget, UnreachedStatus
from orchestrator.fleet.inputs import Inputs
from orchestrator.fleet.status import status

POLL_SECONDS = 2.0
"""Between two reads of the fleet."""
MOVING: frozenset[TargetState] = frozenset({"deploying", "unhealthy"})
"""The states a wait waits out: a run at work, a server not (yet) answering healthy."""
TIMED_OUT = 3
INTERRUPTED = 130


def waiting_for(target: StatusTarget | UnreachedStatus) -> str | None:
    """What a wait waits for on one container (`ct200: run R by ops@vm, at 'gate'`);
    None when nothing there can still change by itself."""
    if target.state not in MOVING or isinstance(target, UnreachedStatus):
        return None
    run = target.deploying
    if run is not None:
        step = f", at '{run.step}'" if run.step else ""
        return f"{target.name}: run {run.run_id} by {run.owner}{step}"
    answered = "no answer" if target.health is None else f"HTTP {target.health}"
    return f"{target.name}: server not healthy yet (/health: {answered})"


def wait_for_status(
    inputs: Inputs,
    deadline: Deadline,
    say: Callable[[str], None],
    connect: Connect = SSH,
) -> tuple[Status, int]:
    """Read the status every POLL_SECONDS until nothing is moving, `deadline` passes
    (exit 3) or its `cancel` is set (exit 130); `say` is told what is waited for each
    time that changes."""
    said: list[str] = []
    while True:
        document, code = status(inputs, connect)
        waiting = [words for t in document.targets if (words := waiting_for(t))]
        if not waiting:
            return document, code
        if waiting != said:
            for line in waiting:
                say(f"waiting for {line}")
            said = waiting
        if deadline.expired():
            say(f"still waiting after {deadline.seconds:g} s: " + "; ".join(waiting))
            return _ended(document, TIMED_OUT)
        deadline.pause(POLL_SECONDS)
        if deadline.cancel.is_set():
            return _ended(document, INTERRUPTED)


def _ended(document: Status, code: int) -> tuple[Status, int]:
    return document.model_copy(update={"result": run_result(code)}), code
