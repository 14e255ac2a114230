"""How many SSH connections a run keeps to one host, and when it opens another: within
the host's MaxStartups, sshd's limit on connections that have not logged in yet.

sshd never drops a connection while fewer than MaxStartups' `start` others are still
unauthenticated; from `start` on it drops new ones, at `rate`% and rising to all of them
at `full` (OpenSSH 9.2p1 `sshd.c:819-833`, `should_drop_connection`; defaults 10:30:100 at
`servconf.c:396-401`, a single number N meaning N:30:N at `servconf.c:1972-1986`; Debian
12's openssh-server 1:9.2p1-2+deb12u10 ships it commented out, `/etc/ssh/sshd_config:103`,
and `sshd -T -f /dev/null` prints `maxstartups 10:30:100`). A run opens one connection to
a host at a time, and keeps at most half of `start`: were all of them logging in again at
once, they would take half of what sshd admits without dropping, the rest left to the
host's other clients. A host whose `start` is 2 or 3 gets one connection, as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STARTUPS = re.compile(r"^([1-9]\d*)(?::([1-9]\d*):([1-9]\d*))?$")
"""`start` or `start:rate:full`, as sshd_config(5) writes MaxStartups."""


@dataclass(frozen=True)
class Startups:
    """A host's MaxStartups."""

    start: int
    rate: int
    full: int

    @classmethod
    def parse(cls, text: str) -> Startups:
        """`start[:rate:full]` (checked by the inventory's pattern, STARTUPS)."""
        found = STARTUPS.fullmatch(text)
        if found is None:
            raise ValueError(f"not a MaxStartups value: {text!r}")
        start, rate, full = found.groups()
        if rate is None:
            return cls(int(start), OPENSSH_STARTUPS.rate, int(start))
        return cls(int(start), int(rate), int(full))


OPENSSH_STARTUPS = Startups(10, 30, 100)


def most_connections(startups: Startups) -> int:
    """The connections a run keeps to one host at most: half of `start`, at least one."""
    return max(1, startups.start // 2)


def open_another(free_sessions: int, connections: int, opening: bool, most: int) -> bool:
    """Whether a command due now gets a new connection to its host: every open one's
    sessions are taken, no other is being opened (one login at a time), and fewer than
    `most` are open."""
    return free_sessions == 0 and not opening and connections < most
