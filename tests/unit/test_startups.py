"""How many connections a run keeps to one host, and when it opens another."""

from __future__ import annotations

import pytest

from orchestrator.transport.startups import (
    OPENSSH_STARTUPS,
    Startups,
    most_connections,
    open_another,
)


def test_maxstartups_is_read_as_sshd_reads_it() -> None:
    assert Startups.parse("10:30:100") == OPENSSH_STARTUPS == Startups(10, 30, 100)
    assert Startups.parse("4") == Startups(4, 30, 4)  # one number: start and full
    for wrong in ("", "0", "10:30", "a:b:c", "10:30:100:1", "-1", "10\n"):
        with pytest.raises(ValueError):
            Startups.parse(wrong)


@pytest.mark.parametrize(
    ("startups", "most"),
    [("10:30:100", 5), ("20", 10), ("11:30:60", 5), ("3", 1), ("2:50:10", 1), ("1", 1)],
)
def test_at_most_half_of_what_sshd_admits_without_dropping(startups: str, most: int) -> None:
    assert most_connections(Startups.parse(startups)) == most


def test_another_connection_only_when_every_session_is_taken() -> None:
    assert open_another(free_sessions=0, connections=1, opening=False, most=5)
    assert open_another(free_sessions=0, connections=0, opening=False, most=5)  # the first
    assert not open_another(free_sessions=1, connections=1, opening=False, most=5)
    assert not open_another(free_sessions=0, connections=1, opening=True, most=5)
    assert not open_another(free_sessions=0, connections=5, opening=False, most=5)
    assert not open_another(free_sessions=0, connections=1, opening=False, most=1)
