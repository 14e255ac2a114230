"""The deploy lock's heartbeat, against a container answering its commands by concern."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence

import pytest
from clocks import FakeClock

from orchestrator.container.lock import DeployLock, Owner
from orchestrator.documents.fleet import lock_holder
from orchestrator.errors import LockHeld
from orchestrator.layout import Layout
from orchestrator.report import tables
from orchestrator.transport.base import Result
from orchestrator.transport.memory import MemoryTransport, reply


def test_the_holder_renews_its_heartbeat_while_it_holds_the_lock() -> None:
    renewals = iter([0, 0, 1])  # the third finds the lock broken and taken by another
    beats: list[object] = []
    released: list[object] = []

    def renew(argv: Sequence[str], _: bytes | None) -> Result:
        beats.append(getattr(argv, "args", {}).get("run_id"))
        return reply(exit_code=next(renewals, 1))(argv, None)

    def release(argv: Sequence[str], _: bytes | None) -> Result:
        released.append(getattr(argv, "args", {}).get("run_id"))
        return reply()(argv, None)

    transport = (
        MemoryTransport()
        .on("acquire_lock", reply())
        .on("renew_lock", renew)
        .on("release_lock", release)
    )
    clock = FakeClock()
    lock = DeployLock(transport, Layout("/srv/q"), Owner.me("r1", "ops"), lease=0.2, clock=clock)

    with lock.held() as taken_over:
        assert taken_over is None
        while lock.lost is None:  # the lease's time passes on the clock the heartbeat waits on
            clock.sleep(0.05, threading.Event())

    assert len(beats) >= 3 and set(beats) == {"r1"}
    assert lock.lost and "no longer this run's" in lock.lost
    assert released == ["r1"]  # released at the end, only if still this run's


def test_a_held_lock_names_its_holder_as_status_and_unlock_do() -> None:
    """`run R of alice@ops1 36s ago (pid 4242)`, never the owner file's JSON or its epoch."""
    holder = Owner("r-other", "alice", "ops1", 4242, time.time() - 36)
    printed = f"heartbeat 1700000000 812.50 1700000005 817.50\n{holder.to_json()}"
    transport = MemoryTransport().on("acquire_lock", reply(printed.encode(), exit_code=1))
    lock = DeployLock(transport, Layout("/srv/q"), Owner.me("r1", "ops"), lease=600)

    with pytest.raises(LockHeld) as refused:
        lock.acquire()

    message = str(refused.value)
    assert re.search(
        r"deploy lock held by run r-other of alice@ops1 3\ds ago \(pid 4242\), ", message
    )
    assert "{" not in message and str(int(holder.since)) not in message
    assert tables.locked_by(lock_holder(holder.to_json())) == holder.who()


def test_a_renewal_finding_no_lock_says_it_was_removed_not_taken() -> None:
    transport = MemoryTransport().on("renew_lock", reply(exit_code=3))
    lock = DeployLock(transport, Layout("/srv/q"), Owner.me("r1", "ops"), lease=600)

    lock.renew()

    assert lock.lost and "removed" in lock.lost and "orch unlock --force" in lock.lost
    assert "taken by another" not in lock.lost


def test_the_lock_records_the_holders_own_lease() -> None:
    taken: list[str] = []

    def acquire(argv: Sequence[str], _: bytes | None) -> Result:
        taken.append(getattr(argv, "args", {})["owner_json"])
        return reply()(argv, None)

    transport = MemoryTransport().on("acquire_lock", acquire)
    DeployLock(transport, Layout("/srv/q"), Owner.me("r1", "ops"), lease=5).acquire()

    recorded = Owner.parse(taken[0])
    assert recorded and recorded.lease == 5 and recorded.pid_start is not None
