"""The deploy lock's heartbeat, against a container answering its commands by concern."""

from __future__ import annotations

from collections.abc import Sequence

from shelltools import wait_until

from orchestrator.container.lock import DeployLock, Owner
from orchestrator.layout import Layout
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
    lock = DeployLock(transport, Layout("/srv/q"), Owner.me("r1", "ops"), lease=0.2)

    with lock.held() as taken_over:
        assert taken_over is None
        wait_until(lambda: lock.lost is not None)

    assert len(beats) >= 3 and set(beats) == {"r1"}
    assert lock.lost and "no longer this run's" in lock.lost
    assert released == ["r1"]  # released at the end, only if still this run's
