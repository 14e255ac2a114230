"""The deploy lock of one deployment: acquire, release, read its owner, take it over.

The lock is a directory (`mkdir` is atomic) holding `owner.json`: run id, user,
control host, PID and since when. A run holds it from before preflight until
after its last switch; `held()` is the context manager that does both ends.

An owner that is provably gone is taken over instead of refused: the same
control host and its PID is dead, or the lock is older than the playbook's
`lock_lease`. Anything else is held, and `orch unlock` stays for it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from orchestrator import commands
from orchestrator.errors import LockHeld, StepFailed
from orchestrator.facts import parse_frames
from orchestrator.layout import Layout
from orchestrator.remote import run_step
from orchestrator.transport.base import Transport

TIMEOUT = 60.0


@dataclass(frozen=True)
class Owner:
    run_id: str
    user: str
    control_host: str
    pid: int | None
    since: float  # seconds since the epoch

    @classmethod
    def me(cls, run_id: str, user: str) -> Owner:
        return cls(run_id, user, socket.gethostname(), os.getpid(), time.time())

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner a lock records; None for text that is not one (then it is never
        judged gone: an unreadable owner is a person's call)."""
        try:
            data = json.loads(text)
            return cls(
                str(data["run_id"]),
                str(data.get("user", "?")),
                str(data.get("control_host", "?")),
                int(data["pid"]) if data.get("pid") is not None else None,
                float(data["since"]),
            )
        except (ValueError, TypeError, KeyError):
            return None

    def gone(self, lease: float | None) -> str | None:
        """Why this owner can no longer be running, or None if it may be."""
        if self.control_host == socket.gethostname() and self.pid and not _pid_alive(self.pid):
            return f"its process {self.pid} on {self.control_host} is gone"
        age = time.time() - self.since
        if lease is not None and age > lease:
            return f"it is {age:.0f} s old, beyond lock_lease {lease:g} s"
        return None

    def __str__(self) -> str:
        since = datetime.fromtimestamp(self.since, UTC).isoformat(timespec="seconds")
        return (
            f"run {self.run_id} by {self.user} on {self.control_host} (pid {self.pid}) "
            f"since {since}"
        )


def lock_holder(text: str) -> dict[str, object] | None:
    """A lock's owner as a document field: None when there is no lock; `{"text": ...}`
    when the owner file is not one orch wrote."""
    if not text.strip():
        return None
    owner = Owner.parse(text)
    if owner is None:
        return {"text": text.strip()}
    return {**asdict(owner), "since": datetime.fromtimestamp(owner.since, UTC).isoformat()}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


class DeployLock:
    def __init__(
        self, transport: Transport, layout: Layout, owner: Owner, lease: float | None = None
    ) -> None:
        self.transport, self.layout, self.owner, self.lease = transport, layout, owner, lease

    def acquire(self) -> str | None:
        """Take the lock, or take over a gone owner's; returns a line saying whose it
        was when taken over. Raises LockHeld when someone may still hold it."""
        result = self.transport.run(
            commands.acquire_lock(self.layout.lock, self.owner.to_json()), timeout=TIMEOUT
        )
        if result.exit_code == 0:
            return None
        if result.exit_code != 1:
            raise StepFailed(
                f"cannot create the deploy lock {self.layout.lock}: {result.error_text}",
                subject=self.transport.label,
            )
        held_text = result.text.strip()
        holder = Owner.parse(held_text)
        reason = holder.gone(self.lease) if holder else None
        if holder and reason and self.take_over(held_text):
            return f"took over the deploy lock of {holder}: {reason}"
        raise LockHeld(
            f"deploy lock held: {held_text or 'unknown owner'}; "
            f"if that run is gone, remove it with 'orch unlock'",
            subject=self.transport.label,
        )

    def take_over(self, stale_text: str) -> bool:
        """Replace the owner if it is still `stale_text` (another run may have won)."""
        argv = commands.take_over_lock(self.layout.lock, stale_text, self.owner.to_json())
        return self.transport.run(argv, timeout=TIMEOUT).exit_code == 0

    def release(self) -> None:
        """Only if it is still ours: a lock broken and retaken meanwhile stays."""
        self.transport.run(
            commands.release_lock(self.layout.lock, self.owner.run_id), timeout=TIMEOUT
        )

    @contextmanager
    def held(self) -> Iterator[str | None]:
        taken_over = self.acquire()
        try:
            yield taken_over
        finally:
            self.release()


def read_owner(transport: Transport, layout: Layout) -> str:
    """The owner text of the lock as it is, '' when there is none."""
    frames = run_step(transport, commands.read_files([layout.lock_owner]), "read the lock")
    return parse_frames(frames.stdout).get(layout.lock_owner, b"").decode("utf-8", "replace")


def remove(transport: Transport, layout: Layout) -> str:
    """`orch unlock`: remove whoever's lock it is; returns whose it was."""
    owner = read_owner(transport, layout)
    run_step(transport, commands.release_lock(layout.lock), "remove lock")
    return owner
