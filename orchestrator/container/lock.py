"""The deploy lock of one deployment: acquire, release, read its owner, take it over:
its scripts, the owner record, and `DeployLock`, which runs them.

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

from orchestrator.container.shell import builder, q, read_whole, run_step, script
from orchestrator.errors import LockHeld, StepFailed
from orchestrator.layout import Layout
from orchestrator.transport.base import Transport

TIMEOUT = 60.0


# --- the scripts ----------------------------------------------------------------------


@builder
def acquire_lock(lock_dir: str, owner_json: str) -> list[str]:
    """mkdir is atomic: exit 0 and the lock is ours; exit 1 and it is held (the owner
    is printed); exit 2 and it could not be made at all (stderr says why)."""
    lock, owner = q(lock_dir), q(lock_dir + "/owner.json")
    return script(
        f"mkdir -p {q(lock_dir.rsplit('/', 1)[0])} || exit 2\n"
        f"if mkdir {lock} 2>/dev/null; then printf %s {q(owner_json)} > {owner}; exit 0; fi\n"
        f"[ -d {lock} ] || {{ mkdir {lock}; exit 2; }}\n"
        f"cat {owner} 2>/dev/null; exit 1"
    )


@builder
def release_lock(lock_dir: str, run_id: str | None = None) -> list[str]:
    """Remove the lock; given a run id, only if that run holds it (a lock broken with
    `orch unlock` and taken by another run meanwhile stays)."""
    owner = q(lock_dir + "/owner.json")
    guard = f"grep -qF {q(run_id)} {owner} 2>/dev/null || exit 0\n" if run_id else ""
    busy = q(lock_dir + "/takeover")
    return script(guard + f"rm -f {owner}; rmdir {busy} {q(lock_dir)} 2>/dev/null || true")


@builder
def take_over_lock(lock_dir: str, stale_owner: str, owner_json: str) -> list[str]:
    """Replace the owner of a lock whose holder is gone, only if it is still `stale_owner`.

    `mkdir takeover` makes the check-and-replace exclusive: of two runs that both found
    the same stale owner, one replaces it and the other then sees the new owner. Exit 0:
    the lock is ours; exit 1: it is held by someone else now (printed).
    """
    lock, owner, busy = q(lock_dir), q(lock_dir + "/owner.json"), q(lock_dir + "/takeover")
    return script(
        f"[ -d {lock} ] || exit 1\n"
        f"mkdir {busy} 2>/dev/null || {{ cat {owner} 2>/dev/null; exit 1; }}\n"
        f'if [ "$(cat {owner} 2>/dev/null)" = {q(stale_owner)} ]; then\n'
        f"  printf %s {q(owner_json)} > {owner}.tmp && mv -f {owner}.tmp {owner}; rc=0\n"
        f"else cat {owner} 2>/dev/null; rc=1; fi\n"
        f"rmdir {busy}; exit $rc"
    )


# --- the owner and the lock -----------------------------------------------------------


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
            acquire_lock(self.layout.lock, self.owner.to_json()), timeout=TIMEOUT
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
        argv = take_over_lock(self.layout.lock, stale_text, self.owner.to_json())
        return self.transport.run(argv, timeout=TIMEOUT).exit_code == 0

    def release(self) -> None:
        """Only if it is still ours: a lock broken and retaken meanwhile stays."""
        self.transport.run(release_lock(self.layout.lock, self.owner.run_id), timeout=TIMEOUT)

    @contextmanager
    def held(self) -> Iterator[str | None]:
        taken_over = self.acquire()
        try:
            yield taken_over
        finally:
            self.release()


def read_owner(transport: Transport, layout: Layout) -> str:
    """The owner text of the lock as it is, '' when there is none."""
    frames = read_whole(transport, [layout.lock_owner], "read the lock")
    return frames.get(layout.lock_owner, b"").decode("utf-8", "replace")


def remove(transport: Transport, layout: Layout) -> str:
    """`orch unlock`: remove whoever's lock it is; returns whose it was."""
    owner = read_owner(transport, layout)
    run_step(transport, release_lock(layout.lock), "remove lock")
    return owner
