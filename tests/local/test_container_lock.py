"""The deploy lock's scripts: exact argv, then mkdir races and take-overs under /bin/sh."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from shelltools import (
    run,
)

from orchestrator.container.lock import acquire_lock, release_lock, take_over_lock
from orchestrator.container.shell import (
    point_link,
)


def test_point_link_and_lock_scripts() -> None:
    assert point_link("/d d/cur;rm", "releases/ab'c") == [
        "/bin/sh",
        "-c",
        """set -e; ln -sfn 'releases/ab'"'"'c' '/d d/cur;rm'.tmp; """
        "mv -Tf '/d d/cur;rm'.tmp '/d d/cur;rm'",
    ]
    assert acquire_lock("/var/lib/orch/q/lock", '{"user": "o\'brien"}') == [
        "/bin/sh",
        "-c",
        "mkdir -p /var/lib/orch/q || exit 2\n"
        "if mkdir /var/lib/orch/q/lock 2>/dev/null; "
        """then printf %s '{"user": "o'"'"'brien"}' > /var/lib/orch/q/lock/owner.json; """
        "exit 0; fi\n"
        "[ -d /var/lib/orch/q/lock ] || { mkdir /var/lib/orch/q/lock; exit 2; }\n"
        "cat /var/lib/orch/q/lock/owner.json 2>/dev/null; exit 1",
    ]
    assert release_lock("/var/lib/orch/q/lock") == [
        "/bin/sh",
        "-c",
        "rm -f /var/lib/orch/q/lock/owner.json; "
        "rmdir /var/lib/orch/q/lock/takeover /var/lib/orch/q/lock 2>/dev/null || true",
    ]
    assert release_lock("/l/lock", "run 1")[2].startswith(
        "grep -qF 'run 1' /l/lock/owner.json 2>/dev/null || exit 0\n"
    )


def test_a_lock_that_cannot_be_made_is_not_reported_as_held(tmp_path: Path) -> None:
    blocker = tmp_path / "deployment"
    blocker.write_text("a file where the deployment dir should be")
    done = run(acquire_lock(str(blocker / "lock"), "{}"))
    assert done.returncode == 2
    assert done.stderr


def test_release_lock_leaves_another_runs_lock(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    assert run(acquire_lock(str(lock), '{"run_id": "B"}')).returncode == 0
    run(release_lock(str(lock), "A"))
    assert (lock / "owner.json").read_text() == '{"run_id": "B"}'
    run(release_lock(str(lock), "B"))
    assert not lock.exists()


def test_first_mkdir_wins_the_lock_and_the_second_sees_the_owner(tmp_path: Path) -> None:
    lock = str(tmp_path / "deploy it's" / "lock")
    first, second = '{"run_id": "a", "user": "o\'brien"}', '{"run_id": "b"}'

    won = run(acquire_lock(lock, first))
    lost = run(acquire_lock(lock, second))

    assert (won.returncode, won.stdout) == (0, b"")
    assert (lost.returncode, lost.stdout.decode()) == (1, first)
    assert run(release_lock(lock)).returncode == 0
    assert not Path(lock).exists()
    assert run(acquire_lock(lock, second)).returncode == 0
    assert Path(lock, "owner.json").read_text() == second


def test_concurrent_acquires_have_exactly_one_winner(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    racers = [
        subprocess.Popen(acquire_lock(lock, f'{{"n": {n}}}'), stdout=subprocess.PIPE)
        for n in range(8)
    ]
    codes = [racer.wait(timeout=30) for racer in racers]
    for racer in racers:
        racer.stdout.close()  # type: ignore[union-attr]

    assert sorted(codes) == [0] + [1] * 7
    winner = codes.index(0)
    assert json.loads(Path(lock, "owner.json").read_text()) == {"n": winner}


def test_take_over_replaces_only_the_stale_owner_it_was_given(tmp_path: Path) -> None:
    lock = str(tmp_path / "it's" / "lock")
    stale, mine, theirs = '{"run_id": "dead"}', '{"run_id": "me"}', '{"run_id": "other"}'
    assert run(acquire_lock(lock, stale)).returncode == 0

    assert run(take_over_lock(lock, theirs, mine)).returncode == 1
    assert Path(lock, "owner.json").read_text() == stale
    assert run(take_over_lock(lock, stale, mine)).returncode == 0
    assert Path(lock, "owner.json").read_text() == mine
    again = run(take_over_lock(lock, stale, theirs))
    assert (again.returncode, again.stdout.decode()) == (1, mine)
    assert sorted(p.name for p in Path(lock).iterdir()) == ["owner.json"]
    run(release_lock(lock, "me"))
    assert not Path(lock).exists()


def test_concurrent_take_overs_of_one_stale_owner_have_exactly_one_winner(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    stale = '{"run_id": "dead"}'
    assert run(acquire_lock(lock, stale)).returncode == 0
    racers = [
        subprocess.Popen(take_over_lock(lock, stale, f'{{"n": {n}}}'), stdout=subprocess.DEVNULL)
        for n in range(8)
    ]
    codes = [racer.wait(timeout=30) for racer in racers]

    assert sorted(codes) == [0] + [1] * 7
    assert json.loads(Path(lock, "owner.json").read_text()) == {"n": codes.index(0)}


def test_releasing_a_lock_nobody_holds_succeeds(tmp_path: Path) -> None:
    assert run(release_lock(str(tmp_path / "lock"))).returncode == 0
