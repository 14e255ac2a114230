"""Running commands as another user through `sudo -n` (inventory `become: sudo`).

`-n` (non-interactive) makes sudo fail at once instead of waiting for a password
nobody can type; its refusal is recognised here and turned into a fix. Sources:
sudo-project/sudo `plugins/sudoers/logging.c` (docs/field-notes/ssh.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.transport.base import Result

DEFAULT_USER = "root"
# sudo's own lines start with its name; sshd may print lines before them (no home dir).
PASSWORD_REQUIRED = re.compile(rb"^sudo: a password is required", re.MULTILINE)
REFUSED = re.compile(
    rb"^sudo: .*(?:is not in the sudoers file|is not allowed to execute|may not run sudo)",
    re.MULTILINE,
)


def sudo_argv(argv: Sequence[str], user: str | None = None) -> list[str]:
    """argv run as `user` (root by default) by sudo, without a prompt; quoted later, once."""
    return ["sudo", "-n", "-u", user or DEFAULT_USER, "--", *argv]


def refusal(result: Result, login: str | None, user: str | None) -> tuple[str, str] | None:
    """(reason, fix) when sudo itself refused to run the command, else None."""
    if result.exit_code != 1:
        return None
    who = login or "the login user"
    target = user or DEFAULT_USER
    rule = f"{who} ALL=({target}) NOPASSWD: ALL"
    if PASSWORD_REQUIRED.search(result.stderr):
        return (
            f"sudo wants a password to run commands as {target}",
            f"let {who} run orch's commands without one: a NOPASSWD rule in "
            f"/etc/sudoers.d/orch such as '{rule}' (or narrower: pct, sh, and the "
            "tools in the playbook), checked with visudo -c",
        )
    if refused := REFUSED.search(result.stderr):
        return (
            f"sudo refused: {refused.group().decode('utf-8', 'replace')}",
            f"allow {who} to run commands as {target}: a rule such as '{rule}' in "
            "/etc/sudoers.d/orch",
        )
    return None
