"""One per-target function over many targets, a bounded number at a time.

Like Fabric's GroupResult: every target gets its turn whatever happened to the
others, and the caller gets the successes and the failures apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from orchestrator.errors import OrchError

T = TypeVar("T")
READ_PARALLEL = 8  # read-only commands (status, unlock, verify-config) at a time
LOOK_SECONDS = 0.1
"""How long the caller waits for the targets at a time. CPython runs a signal's handler
in the main thread only, and the kernel may hand a process's signal to any of its
threads: one a worker takes only marks the handler due, and a main thread in a single
wait for the results runs it when that wait ends (a SIGINT during a gate acted on after
the gate had run out, 29.8 s late). Waking this often, the caller runs it within a look."""


@dataclass
class GroupResult(Generic[T]):
    succeeded: dict[str, T] = field(default_factory=dict)
    failed: dict[str, OrchError] = field(default_factory=dict)


def fan_out(names: Sequence[str], action: Callable[[str], T], parallel: int) -> GroupResult[T]:
    """`action(name)` for every name, at most `parallel` at once; an OrchError is that
    name's failure, anything else is a bug and propagates."""

    def attempt(name: str) -> tuple[str, T | None, OrchError | None]:
        try:
            return name, action(name), None
        except OrchError as exc:
            return name, None, exc

    group: GroupResult[T] = GroupResult()
    if not names:
        return group
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(names)))) as pool:
        futures = [pool.submit(attempt, name) for name in names]
        while wait(futures, timeout=LOOK_SECONDS).not_done:
            pass  # back in the interpreter: a signal's handler runs here
        for future in futures:
            name, value, error = future.result()
            if error is not None:
                group.failed[name] = error
            else:
                group.succeeded[name] = value  # type: ignore[assignment]
    return group
