"""How to log in somewhere, as the SSH transport reads it: the settings it needs (the
inventory's SshSettings has them) and the `[user@]host[:port]` syntax of a jump host."""

from __future__ import annotations

import re
from typing import Protocol

JUMP = re.compile(
    r"^(?:([A-Za-z0-9._][A-Za-z0-9._-]*)@)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9._-]*)(?::(\d+))?$"
)


class Login(Protocol):
    """Unset fields mean the defaults (ssh's user and port, ~/.ssh/known_hosts, ...)."""

    @property
    def user(self) -> str | None: ...
    @property
    def port(self) -> int | None: ...
    @property
    def identity_file(self) -> str | None: ...
    @property
    def known_hosts(self) -> str | None: ...
    @property
    def max_sessions(self) -> int | None: ...
    @property
    def max_startups(self) -> str | None: ...
    @property
    def become(self) -> str | None: ...
    @property
    def become_user(self) -> str | None: ...
    @property
    def jump(self) -> str | None: ...


def parse_jump(value: str) -> tuple[str | None, str, int | None]:
    """`user@host:port` (user and port optional, `[v6]` in brackets) -> (user, host, port)."""
    found = JUMP.match(value)
    assert found is not None  # checked when the inventory was loaded
    user, host, port = found.groups()
    return user, host.strip("[]"), int(port) if port else None
