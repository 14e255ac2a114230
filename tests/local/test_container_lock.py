"""The deploy lock's scripts: exact argv, then mkdir races and take-overs under /bin/sh."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from shelltools import (
    run,
    tree,
)

from orchestrator.container.lock import (
    acquire_lock,
    parse_held,
    release_lock,
    renew_lock,
    take_over_lock,
)
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
        "mkdir -p /var/lib/orch/q && new=$(mktemp -d /var/lib/orch/q/.lock.XXXXXX) || exit 2\n"
        """trap 'rm -rf "$new"' EXIT; trap 'exit 2' HUP INT PIPE TERM\n"""
        """printf %s '{"user": "o'"'"'brien"}' > "$new/owner.json" || exit 2\n"""
        """{ cut -d" " -f1 /proc/uptime > "$new/heartbeat".$$ """
        """&& mv -f "$new/heartbeat".$$ "$new/heartbeat"; } 2>/dev/null """
        """|| { rm -f "$new/heartbeat".$$; : > "$new/heartbeat"; } || exit 2\n"""
        """if mv -T "$new" /var/lib/orch/q/lock 2>/dev/null; then trap - EXIT; exit 0; fi\n"""
        """[ -d /var/lib/orch/q/lock ] || { mv -T "$new" /var/lib/orch/q/lock; exit 2; }\n"""
        "mtime=$(stat -c %Y /var/lib/orch/q/lock/heartbeat 2>/dev/null "
        "|| stat -c %Y /var/lib/orch/q/lock/owner.json 2>/dev/null "
        "|| stat -c %Y /var/lib/orch/q/lock) "
        "&& beat=$(head -c 32 /var/lib/orch/q/lock/heartbeat 2>/dev/null | tr -cd 0-9.) "
        """&& hb="$mtime ${beat:--}" || exit 2\n"""
        """now=$(cut -d" " -f1 /proc/uptime 2>/dev/null)\n"""
        """echo "heartbeat $hb $(date +%s) ${now:--}"\n"""
        "cat /var/lib/orch/q/lock/owner.json 2>/dev/null; exit 1",
    ]
    assert release_lock("/var/lib/orch/q/lock") == [
        "/bin/sh",
        "-c",
        "[ -d /var/lib/orch/q/lock ] || exit 0\n"
        "gone=$(mktemp -d /var/lib/orch/q/lock.gone.XXXXXX) || exit 1\n"
        'mv -T /var/lib/orch/q/lock "$gone/lock" || { rmdir "$gone"; exit 1; }\n'
        'rm -rf "$gone"',
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
    assert lost.returncode == 1
    assert parse_held(lost.stdout.decode()).owner_text == first
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


def held(lock: str, owner: str) -> str:
    """The heartbeat mtime a second acquire sees (what a take-over must still find)."""
    done = run(acquire_lock(lock, owner))
    assert done.returncode == 1
    return parse_held(done.stdout.decode()).heartbeat


def test_take_over_replaces_only_the_stale_owner_it_was_given(tmp_path: Path) -> None:
    lock = str(tmp_path / "it's" / "lock")
    stale, mine, theirs = '{"run_id": "dead"}', '{"run_id": "me"}', '{"run_id": "other"}'
    assert run(acquire_lock(lock, stale)).returncode == 0
    beat = held(lock, theirs)

    assert run(take_over_lock(lock, theirs, beat, mine)).returncode == 1
    assert Path(lock, "owner.json").read_text() == stale
    assert run(take_over_lock(lock, stale, beat, mine)).returncode == 0
    assert Path(lock, "owner.json").read_text() == mine
    again = run(take_over_lock(lock, stale, beat, theirs))
    assert (again.returncode, again.stdout.decode()) == (1, mine)
    assert sorted(p.name for p in Path(lock).iterdir()) == ["heartbeat", "owner.json"]
    run(release_lock(lock, "me"))
    assert not Path(lock).exists()
    assert tree(tmp_path) == {"it's"}


def test_a_renewed_heartbeat_keeps_the_lock_from_a_take_over(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    owner = '{"run_id": "alive"}'
    assert run(acquire_lock(lock, owner)).returncode == 0
    os.utime(Path(lock, "heartbeat"), (1000, 1000))  # a heartbeat seen long ago...
    seen = held(lock, "{}")
    assert seen.startswith("1000 ")
    assert run(renew_lock(lock, "alive")).returncode == 0  # ...renewed since

    assert run(take_over_lock(lock, owner, seen, '{"run_id": "thief"}')).returncode == 1
    assert Path(lock, "owner.json").read_text() == owner
    assert run(renew_lock(lock, "thief")).returncode == 1  # only the holder renews


def test_the_heartbeat_holds_the_containers_uptime_and_is_aged_by_it(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    assert run(acquire_lock(lock, '{"run_id": "a"}')).returncode == 0
    beat = float(Path(lock, "heartbeat").read_text())
    assert abs(beat - uptime()) < 5
    Path(lock, "heartbeat").write_text(f"{uptime() - 30:.2f}\n")  # written 30 s ago

    age = parse_held(run(acquire_lock(lock, "{}")).stdout.decode()).age

    assert 29 <= age <= 35
    assert run(renew_lock(lock, "a")).returncode == 0
    assert abs(float(Path(lock, "heartbeat").read_text()) - uptime()) < 5


def test_an_older_heartbeat_is_aged_on_the_containers_wall_clock(tmp_path: Path) -> None:
    """Written by an older orch: empty, so its mtime says when."""
    lock = str(tmp_path / "lock")
    assert run(acquire_lock(lock, '{"run_id": "a"}')).returncode == 0
    Path(lock, "heartbeat").write_bytes(b"")
    os.utime(Path(lock, "heartbeat"), (time.time() - 7200, time.time() - 7200))

    age = parse_held(run(acquire_lock(lock, "{}")).stdout.decode()).age

    assert 7199 <= age <= 7230


def test_a_renewal_tells_a_removed_lock_from_one_taken_by_another(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    assert run(acquire_lock(lock, '{"run_id": "mine"}')).returncode == 0
    assert run(renew_lock(lock, "other")).returncode == 1
    assert run(release_lock(lock)).returncode == 0
    assert run(renew_lock(lock, "mine")).returncode == 3
    assert not Path(lock).exists()


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def test_a_lock_is_never_seen_without_its_owner(tmp_path: Path) -> None:
    """Built whole and renamed in: a racing reader finds either no lock or its owner."""
    lock = tmp_path / "lock"
    seen: list[bool] = []
    for n in range(20):
        assert run(acquire_lock(str(lock), f'{{"n": {n}}}')).returncode == 0
        seen.append(Path(lock, "owner.json").read_text() == f'{{"n": {n}}}')
        assert run(release_lock(str(lock))).returncode == 0
    assert all(seen) and tree(tmp_path) == set()


def test_concurrent_take_overs_of_one_stale_owner_have_exactly_one_winner(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    stale = '{"run_id": "dead"}'
    assert run(acquire_lock(lock, stale)).returncode == 0
    beat = held(lock, "{}")
    racers = [
        subprocess.Popen(
            take_over_lock(lock, stale, beat, f'{{"n": {n}}}'), stdout=subprocess.DEVNULL
        )
        for n in range(8)
    ]
    codes = [racer.wait(timeout=30) for racer in racers]

    assert sorted(codes) == [0] + [1] * 7
    assert json.loads(Path(lock, "owner.json").read_text()) == {"n": codes.index(0)}


def test_releasing_a_lock_nobody_holds_succeeds(tmp_path: Path) -> None:
    assert run(release_lock(str(tmp_path / "lock"))).returncode == 0
