"""The deploy lock of one deployment: acquire, renew, release, read its owner, take it
over: its scripts, the owner record, and `DeployLock`, which runs them.

The lock is a directory holding `owner.json` (run id, user, control host, PID and
since when) and `heartbeat`, whose modification time the holder renews every
quarter lease while it holds the lock. It is built whole in a temp dir and renamed
into place (`mv -T` of a directory is atomic and fails on a held, non-empty lock), so
a lock is never seen without its owner. A run holds it from before preflight until
after its last switch; `held()` does both ends and the renewals between.

An owner that is provably gone is taken over instead of refused: the same control
host and its PID is dead, or its heartbeat stopped for longer than the lease, the
heartbeat's age measured on the container's own clock (never the local clock
against a stored time). An owner file that cannot be read is judged by its
heartbeat alone. Anything else is held, and `orch unlock` stays for it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from orchestrator.container.shell import builder, q, read_whole, reading, run_step, script
from orchestrator.durations import ago
from orchestrator.errors import LockHeld, OrchError, StepFailed
from orchestrator.layout import Layout
from orchestrator.transport.base import Transport

TIMEOUT = 60.0
DEFAULT_LEASE = 600.0
"""The lease when the playbook sets none: a heartbeat silent this long means its run is gone."""
RENEWALS_PER_LEASE = 4


# --- the scripts ----------------------------------------------------------------------


def _heartbeat_mtime(lock: str) -> str:
    """Shell: the heartbeat's mtime in epoch seconds (the owner file's, then the lock
    dir's, for a lock from before heartbeats)."""
    return (
        f"stat -c %Y {lock}/heartbeat 2>/dev/null || stat -c %Y {lock}/owner.json 2>/dev/null "
        f"|| stat -c %Y {lock}"
    )


@builder
def acquire_lock(lock_dir: str, owner_json: str) -> list[str]:
    """Build the lock whole in a temp dir and rename it into place: exit 0 and the lock
    is ours; exit 1 and it is held (prints `heartbeat MTIME AGE`, the heartbeat's time
    and age in seconds on the container's clock, then the owner); exit 2 and it could
    not be made at all (stderr says why)."""
    lock, parent = q(lock_dir), q(lock_dir.rsplit("/", 1)[0])
    return script(
        f"mkdir -p {parent} && new=$(mktemp -d {parent}/.lock.XXXXXX) || exit 2\n"
        "trap 'rm -rf \"$new\"' EXIT\n"
        f'printf %s {q(owner_json)} > "$new/owner.json" && : > "$new/heartbeat" || exit 2\n'
        f'if mv -T "$new" {lock} 2>/dev/null; then trap - EXIT; exit 0; fi\n'
        f'[ -d {lock} ] || {{ mv -T "$new" {lock}; exit 2; }}\n'
        f"hb=$({_heartbeat_mtime(lock)}) || exit 2\n"
        'echo "heartbeat $hb $(($(date +%s) - hb))"\n'
        f"cat {lock}/owner.json 2>/dev/null; exit 1"
    )


@builder
def renew_lock(lock_dir: str, run_id: str) -> list[str]:
    """Touch the heartbeat while the lock is still `run_id`'s; exit 1 when it is not."""
    lock = q(lock_dir)
    return script(f"grep -qF {q(run_id)} {lock}/owner.json 2>/dev/null && touch {lock}/heartbeat")


@builder
def release_lock(lock_dir: str, run_id: str | None = None) -> list[str]:
    """Remove the lock; given a run id, only if that run holds it (a lock broken with
    `orch unlock` and taken by another run meanwhile stays). Renamed away first, so a
    removal cut short never leaves a lock without its owner."""
    owner, lock = q(lock_dir + "/owner.json"), q(lock_dir)
    guard = f"grep -qF {q(run_id)} {owner} 2>/dev/null || exit 0\n" if run_id else ""
    return script(
        guard
        + f"[ -d {lock} ] || exit 0\n"
        + f"gone=$(mktemp -d {q(lock_dir + '.gone.XXXXXX')}) || exit 1\n"
        + f'mv -T {lock} "$gone/lock" || {{ rmdir "$gone"; exit 1; }}\n'
        + 'rm -rf "$gone"'
    )


@builder
def take_over_lock(
    lock_dir: str, stale_owner: str, stale_heartbeat: str, owner_json: str
) -> list[str]:
    """Replace the owner of a lock whose holder is gone, only if it is still `stale_owner`
    and its heartbeat still `stale_heartbeat` (a holder that renewed meanwhile keeps it).

    `mkdir takeover` makes the check-and-replace exclusive: of two runs that both found
    the same stale owner, one replaces it and the other then sees the new owner. Exit 0:
    the lock is ours; exit 1: it is held by someone else now (printed).
    """
    lock, owner, busy = q(lock_dir), q(lock_dir + "/owner.json"), q(lock_dir + "/takeover")
    return script(
        f"[ -d {lock} ] || exit 1\n"
        f"hb=$({_heartbeat_mtime(lock)})\n"
        f"mkdir {busy} 2>/dev/null || {{ cat {owner} 2>/dev/null; exit 1; }}\n"
        f'if [ "$(cat {owner} 2>/dev/null)" = {q(stale_owner)} ] '
        f'&& [ "$hb" = {q(stale_heartbeat)} ]; then\n'
        f"  printf %s {q(owner_json)} > {owner}.tmp && mv -f {owner}.tmp {owner} "
        f"&& touch {lock}/heartbeat; rc=$?\n"
        f"else cat {owner} 2>/dev/null; rc=1; fi\n"
        f"rmdir {busy}; exit $rc"
    )


@dataclass(frozen=True)
class Held:
    """What acquire_lock printed for a held lock: the heartbeat's time and age (both on
    the container's clock) and the owner text as it is."""

    heartbeat: str
    age: float
    owner_text: str


def parse_held(text: str) -> Held:
    first, _, rest = text.partition("\n")
    with reading("the held lock", text):
        word, mtime, age = first.split()
        if word != "heartbeat":
            raise ValueError("no heartbeat line")
        return Held(mtime, float(age), rest.strip())


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

    def gone(self, lease: float, heartbeat_age: float) -> str | None:
        """Why this owner can no longer be running, or None if it may be. The heartbeat's
        age was measured on the container, so no two clocks are compared."""
        if self.control_host == socket.gethostname() and self.pid and not _pid_alive(self.pid):
            return f"its process {self.pid} on {self.control_host} is gone"
        return heartbeat_stopped(lease, heartbeat_age)

    def who(self) -> str:
        """`root@ops1 3m ago`: the holder as status, unlock and a refused deploy say it."""
        return f"{self.user}@{self.control_host} {ago(self.since)}"

    def __str__(self) -> str:
        return f"run {self.run_id} of {self.who()} (pid {self.pid})"


def heartbeat_stopped(lease: float, heartbeat_age: float) -> str | None:
    if heartbeat_age > lease:
        return (
            f"its heartbeat stopped {heartbeat_age:.0f} s ago (on the container's clock), "
            f"beyond the lease of {lease:g} s"
        )
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


class DeployLock:
    """The lock of one deployment as one run takes, renews and releases it."""

    def __init__(
        self, transport: Transport, layout: Layout, owner: Owner, lease: float | None = None
    ) -> None:
        self.transport, self.layout, self.owner = transport, layout, owner
        self.lease = lease or DEFAULT_LEASE
        self.lost: str | None = None
        """Set by a renewal that found the lock no longer ours (broken and retaken)."""
        self.taken_from: Owner | None = None
        """The gone owner this run took the lock over from, if it did."""

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
        held = parse_held(result.text)
        holder = Owner.parse(held.owner_text)
        reason = (
            holder.gone(self.lease, held.age) if holder else heartbeat_stopped(self.lease, held.age)
        )
        if reason and self.take_over(held):
            self.taken_from = holder
            whose = str(holder) if holder else f"unreadable owner {held.owner_text[:200]!r}"
            return f"took over the deploy lock of {whose}: {reason}"
        who = str(holder) if holder else (held.owner_text or "unknown owner")
        raise LockHeld(
            f"deploy lock held by {who}, heartbeat {held.age:.0f} s ago "
            f"(lease {self.lease:g} s); if that run is gone, remove it with 'orch unlock'",
            subject=self.transport.label,
        )

    def take_over(self, held: Held) -> bool:
        """Replace the owner if it is still the one seen, with the heartbeat seen."""
        argv = take_over_lock(
            self.layout.lock, held.owner_text, held.heartbeat, self.owner.to_json()
        )
        return self.transport.run(argv, timeout=TIMEOUT).exit_code == 0

    def renew(self) -> None:
        result = self.transport.run(
            renew_lock(self.layout.lock, self.owner.run_id), timeout=TIMEOUT
        )
        if result.exit_code == 1:
            self.lost = "the deploy lock is no longer this run's (broken and taken by another)"

    def release(self) -> None:
        """Only if it is still ours: a lock broken and retaken meanwhile stays."""
        self.transport.run(release_lock(self.layout.lock, self.owner.run_id), timeout=TIMEOUT)

    @contextmanager
    def held(self) -> Iterator[str | None]:
        """The lock for the body, its heartbeat renewed every quarter lease meanwhile."""
        taken_over = self.acquire()
        done = threading.Event()
        beat = threading.Thread(target=self._beat, args=(done,), daemon=True)
        beat.start()
        try:
            yield taken_over
        finally:
            done.set()
            beat.join(timeout=TIMEOUT)
            self.release()

    def _beat(self, done: threading.Event) -> None:
        interval = self.lease / RENEWALS_PER_LEASE
        while not done.wait(interval):
            try:
                self.renew()
            except OrchError:
                continue  # the next beat tries again; a lease is several beats long


def read_owner(transport: Transport, layout: Layout) -> str:
    """The owner text of the lock as it is, '' when there is none."""
    frames = read_whole(transport, [layout.lock_owner], "read the lock")
    return frames.get(layout.lock_owner, b"").decode("utf-8", "replace")


def remove(transport: Transport, layout: Layout) -> str:
    """`orch unlock`: remove whoever's lock it is; returns whose it was."""
    owner = read_owner(transport, layout)
    run_step(transport, release_lock(layout.lock), "remove lock")
    return owner
