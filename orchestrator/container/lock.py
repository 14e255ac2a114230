"""The deploy lock of one deployment: acquire, renew, release, read its owner, take it
over: its scripts, the owner record, and `DeployLock`, which runs them.

The lock is a directory holding `owner.json` (run id, user, control host, PID, the
PID's start time and its host's boot id, since when, and the holder's lease) and
`heartbeat`, which the holder rewrites every quarter lease while it holds the lock
with the container's uptime (`/proc/uptime`, a monotonic clock: a step of the
container's wall clock moves neither end of the age). It is built whole in a temp dir
and renamed into place (`mv -T` of a directory is atomic and fails on a held,
non-empty lock), so a lock is never seen without its owner. A run holds it from
before preflight until after its last switch; `held()` does both ends and the
renewals between.

An owner whose process runs on this control host (same host name, same boot, its PID
alive with the start time the lock records) is alive, whatever its heartbeat says,
and is never taken over. An owner that is provably gone is taken over instead of
refused: on this host and boot, its PID is dead or now another process; or its
heartbeat is older than the HOLDER's lease (recorded in the lock; the default lease
for a lock without one), the age measured on the container's uptime (a heartbeat
from a past boot of the container is at least the uptime old); a heartbeat from an
older orch, with no uptime in it, is aged by its mtime on the container's clock. An
owner file that cannot be read is judged by its heartbeat alone. Anything else is
held: `orch unlock` refuses it too, unless forced.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from orchestrator import remotejson
from orchestrator.container.shell import builder, exit_on_signals, q, reading, run_step, script
from orchestrator.deadline import SYSTEM_CLOCK, Clock
from orchestrator.durations import ago
from orchestrator.errors import LockHeld, OrchError, StepFailed
from orchestrator.layout import Layout
from orchestrator.transport.base import Transport

TIMEOUT = 60.0
DEFAULT_LEASE = 600.0
"""The lease when the playbook sets none: a heartbeat silent this long means its run is gone."""
RENEWALS_PER_LEASE = 4


# --- the scripts ----------------------------------------------------------------------


def _heartbeat(lock: str) -> str:
    """Shell: `hb` set to the heartbeat's stamp, `MTIME UPTIME`: its mtime in epoch
    seconds (the owner file's, then the lock dir's, for a lock from before heartbeats)
    and the container uptime it holds (`-` when it holds none: an older orch's)."""
    return (
        f"mtime=$(stat -c %Y {lock}/heartbeat 2>/dev/null "
        f"|| stat -c %Y {lock}/owner.json 2>/dev/null || stat -c %Y {lock})"
        f" && beat=$(head -c 32 {lock}/heartbeat 2>/dev/null | tr -cd 0-9.)"
        ' && hb="$mtime ${beat:--}"'
    )


def _beat_into(path: str) -> str:
    """Shell: the container's uptime written into `path` (a new file, renamed in); on a
    full disk, `path` emptied instead (aged by its mtime, never by a stale uptime)."""
    return (
        f'{{ cut -d" " -f1 /proc/uptime > {path}.$$ && mv -f {path}.$$ {path}; }} 2>/dev/null '
        f"|| {{ rm -f {path}.$$; : > {path}; }}"
    )


def _print_held(lock: str) -> str:
    """Shell: `heartbeat MTIME UPTIME NOW NOW_UPTIME` (the stamp, then the container's
    wall clock and uptime now), then the owner file as it is."""
    return (
        f"{_heartbeat(lock)} || exit 2\n"
        'now=$(cut -d" " -f1 /proc/uptime 2>/dev/null)\n'
        'echo "heartbeat $hb $(date +%s) ${now:--}"\n'
        f"cat {lock}/owner.json 2>/dev/null"
    )


@builder
def acquire_lock(lock_dir: str, owner_json: str) -> list[str]:
    """Build the lock whole in a temp dir and rename it into place: exit 0 and the lock
    is ours; exit 1 and it is held (prints its heartbeat and owner, see `_print_held`);
    exit 2 and it could not be made at all (stderr says why)."""
    lock, parent = q(lock_dir), q(lock_dir.rsplit("/", 1)[0])
    new_heartbeat = '"$new/heartbeat"'
    return script(
        f"mkdir -p {parent} && new=$(mktemp -d {parent}/.lock.XXXXXX) || exit 2\n"
        f"trap 'rm -rf \"$new\"' EXIT; {exit_on_signals(2)}\n"
        f'printf %s {q(owner_json)} > "$new/owner.json" || exit 2\n'
        f"{_beat_into(new_heartbeat)} || exit 2\n"
        f'if mv -T "$new" {lock} 2>/dev/null; then trap - EXIT; exit 0; fi\n'
        f'[ -d {lock} ] || {{ mv -T "$new" {lock}; exit 2; }}\n'
        f"{_print_held(lock)}; exit 1"
    )


@builder
def read_lock(lock_dir: str) -> list[str]:
    """The lock as a refused acquire prints it (see `_print_held`); nothing when there
    is no lock."""
    lock = q(lock_dir)
    return script(f"[ -d {lock} ] || exit 0\n{_print_held(lock)}; exit 0")


@builder
def renew_lock(lock_dir: str, run_id: str) -> list[str]:
    """Rewrite the heartbeat while the lock is still `run_id`'s: exit 1 when another run
    holds it now, exit 3 when there is no lock (removed by `orch unlock --force`), exit 2
    when the heartbeat could not be written (the next renewal tries again)."""
    owner = q(lock_dir + "/owner.json")
    return script(
        f"[ -f {owner} ] || exit 3\n"
        f"grep -qF {q(run_id)} {owner} || exit 1\n"
        f"{_beat_into(q(lock_dir + '/heartbeat'))} || exit 2"
    )


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
        f"mkdir {busy} 2>/dev/null || {{ cat {owner} 2>/dev/null; exit 1; }}\n"
        f"{_heartbeat(lock)}\n"
        f'if [ "$(cat {owner} 2>/dev/null)" = {q(stale_owner)} ] '
        f'&& [ "$hb" = {q(stale_heartbeat)} ]; then\n'
        f"  printf %s {q(owner_json)} > {owner}.tmp && mv -f {owner}.tmp {owner} "
        f"&& {_beat_into(q(lock_dir + '/heartbeat'))}; rc=$?\n"
        f"else cat {owner} 2>/dev/null; rc=1; fi\n"
        f"rmdir {busy}; exit $rc"
    )


@dataclass(frozen=True)
class Held:
    """What acquire_lock printed for a held lock: the heartbeat's stamp (what a take-over
    must still find), its age in seconds on the container, and the owner text as it is."""

    heartbeat: str
    age: float
    owner_text: str


def parse_held(text: str) -> Held:
    first, _, rest = text.partition("\n")
    with reading("the held lock", text):
        word, mtime, beat, now, now_uptime = first.split()
        if word != "heartbeat":
            raise ValueError("no heartbeat line")
        return Held(f"{mtime} {beat}", heartbeat_age(mtime, beat, now, now_uptime), rest.strip())


def heartbeat_age(mtime: str, beat: str, now: str, now_uptime: str) -> float:
    """Seconds since the last beat, by the container's uptime when the heartbeat holds
    one: immune to a step of its wall clock. A beat above the uptime now was written
    before the container last started, so it is at least the uptime old (an age is
    never over-stated: an over-stated age steals a live lock). A heartbeat without an
    uptime (written by an older orch) is aged by its mtime, on the container's clock."""
    if beat != "-" and now_uptime != "-":
        beat_at, uptime = float(beat), float(now_uptime)
        return uptime - beat_at if beat_at <= uptime else uptime
    return float(int(now) - int(mtime))


# --- the owner and the lock -----------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    run_id: str
    user: str
    control_host: str
    pid: int | None
    since: float  # seconds since the epoch
    lease: float | None = None
    """The holder's lease: its heartbeat older than this means it is gone."""
    boot_id: str | None = None
    """The control host's boot id when the lock was taken (a PID means nothing across boots)."""
    pid_start: int | None = None
    """The PID's start time (clock ticks after boot), so a reused PID is not taken as alive."""

    @classmethod
    def me(cls, run_id: str, user: str) -> Owner:
        """This process, as a lock records it (the lease is set by its DeployLock)."""
        pid = os.getpid()
        return cls(
            run_id,
            user,
            socket.gethostname(),
            pid,
            time.time(),
            boot_id=_boot_id(),
            pid_start=_process_start(pid),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner a lock records; None for text that is not one (then it is never
        judged gone: an unreadable owner is a person's call)."""
        try:
            data = remotejson.loads(text)
            lease = float(data["lease"]) if data.get("lease") is not None else None
            return cls(
                str(data["run_id"]),
                str(data.get("user", "?")),
                str(data.get("control_host", "?")),
                int(data["pid"]) if data.get("pid") is not None else None,
                float(data["since"]),
                lease if lease is not None and 0 < lease < float("inf") else None,
                str(data["boot_id"]) if data.get("boot_id") is not None else None,
                int(data["pid_start"]) if data.get("pid_start") is not None else None,
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    @property
    def held_for(self) -> float:
        """The lease its heartbeat is judged by: its own, or the default for a lock
        written without one."""
        return self.lease or DEFAULT_LEASE

    def process(self) -> bool | None:
        """Whether its process provably runs (True) or provably is gone (False) on this
        control host; None when that cannot be known from here (another host, another
        boot of a host by this name, or an older lock's live PID without a start time)."""
        if self.control_host != socket.gethostname() or not self.pid:
            return None
        if self.boot_id is None or self.pid_start is None:  # an older orch's lock
            return False if not _pid_alive(self.pid) else None
        if self.boot_id != _boot_id():
            return None
        return _process_start(self.pid) == self.pid_start

    def alive(self, heartbeat_age: float) -> str | None:
        """Why this owner may still be running (so its lock stays), or None if it is gone."""
        process = self.process()
        if process:
            return f"its process {self.pid} runs on {self.control_host}"
        return heartbeat_fresh(self.held_for, heartbeat_age) if process is None else None

    def gone(self, heartbeat_age: float) -> str | None:
        """Why this owner can no longer be running, or None if it may be. A process
        provably running here keeps its lock whatever its heartbeat says; the
        heartbeat's age was measured on the container, against the holder's lease."""
        process = self.process()
        if process:
            return None
        if process is False:
            return f"its process {self.pid} on {self.control_host} is gone"
        return heartbeat_stopped(self.held_for, heartbeat_age)

    def who(self) -> str:
        """`root@ops1 3m ago`: the holder as status, unlock and a refused deploy say it."""
        return f"{self.user}@{self.control_host} {ago(self.since)}"

    def __str__(self) -> str:
        return f"run {self.run_id} of {self.who()} (pid {self.pid})"


def heartbeat_fresh(lease: float, heartbeat_age: float) -> str | None:
    if heartbeat_age <= lease:
        return f"its heartbeat is {heartbeat_age:.0f} s old, within its lease of {lease:g} s"
    return None


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


def _process_start(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (when the process started, in clock ticks after boot);
    None when there is no such process, or it is a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


class DeployLock:
    """The lock of one deployment as one run takes, renews and releases it."""

    def __init__(
        self,
        transport: Transport,
        layout: Layout,
        owner: Owner,
        lease: float | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.lease = lease or DEFAULT_LEASE
        self.transport, self.layout = transport, layout
        self.clock = clock
        """Where the heartbeat waits between renewals."""
        self.owner = replace(owner, lease=self.lease)
        """Records this run's lease in the lock: a taker judges the heartbeat by it."""
        self.lost: str | None = None
        """Set by a renewal that found the lock no longer ours (removed, or retaken)."""
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
        reason = holder.gone(held.age) if holder else heartbeat_stopped(DEFAULT_LEASE, held.age)
        if reason and self.take_over(held):
            self.taken_from = holder
            whose = str(holder) if holder else f"unreadable owner {held.owner_text[:200]!r}"
            return f"took over the deploy lock of {whose}: {reason}"
        who = str(holder) if holder else (held.owner_text or "unknown owner")
        lease = holder.held_for if holder else DEFAULT_LEASE
        raise LockHeld(
            f"deploy lock held by {who}, heartbeat {held.age:.0f} s ago "
            f"(lease {lease:g} s); if that run is gone, remove it with 'orch unlock'",
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
        elif result.exit_code == 3:
            self.lost = "the deploy lock was removed by orch unlock --force"

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
        while True:
            self.clock.sleep(interval, done)
            if done.is_set():
                return
            try:
                self.renew()
            except OrchError:
                continue  # the next beat tries again; a lease is several beats long


def remove(transport: Transport, layout: Layout, force: bool = False) -> str:
    """`orch unlock`: remove the lock, returning whose it was ('' when there was none).
    A live owner's is refused with LockHeld naming it (its process runs on this control
    host, or its heartbeat is within its lease), unless `force`: then that run finds
    the lock gone at its next heartbeat renewal and switches nothing after it."""
    result = run_step(transport, read_lock(layout.lock), "read the lock")
    if not result.text.strip():
        return ""
    held = parse_held(result.text)
    holder = Owner.parse(held.owner_text)
    alive = holder.alive(held.age) if holder else heartbeat_fresh(DEFAULT_LEASE, held.age)
    if alive and not force:
        who = str(holder) if holder else f"unreadable owner {held.owner_text[:200]!r}"
        raise LockHeld(
            f"deploy lock held by {who}: {alive}; not removed (if that run is gone, "
            "remove it anyway with 'orch unlock --force')",
            subject=transport.label,
        )
    run_step(transport, release_lock(layout.lock, holder.run_id if holder else None), "remove lock")
    return held.owner_text
