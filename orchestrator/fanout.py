"""One per-target function over many targets, a bounded number at a time.

Like Fabric's GroupResult: every target gets its turn whatever happened to the
others, and the caller gets the successes and the failures apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from orchestrator.errors import OrchError

T = TypeVar("T")
READ_PARALLEL = 8  # read-only commands (status, unlock, verify-config) at a time


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
        for name, value, error in pool.map(attempt, names):
            if error is not None:
                group.failed[name] = error
            else:
                group.succeeded[name] = value  # type: ignore[assignment]
    return group
