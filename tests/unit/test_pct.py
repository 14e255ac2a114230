"""pct's own failures told from a command's: by pct's message on the last stderr line,
whatever the exit status but 0, 126 and 127 (docs/field-notes/proxmox.md)."""

from __future__ import annotations

import pytest

from orchestrator.transport.base import Result
from orchestrator.transport.pct import pct_refusal

NO_CONFIG = b"Configuration file 'nodes/pve1/lxc/999.conf' does not exist\n"


def refusal(code: int, stderr: bytes) -> tuple[str, str] | None:
    found = pct_refusal(Result(("true",), code, b"", stderr), "pve1", "/usr/sbin/pct", 999)
    return (found.reason, found.hint) if found else None


@pytest.mark.parametrize("code", [2, 255, 1, 25])
def test_a_wrong_vmid_is_named_whatever_the_exit_status(code: int) -> None:
    assert refusal(code, NO_CONFIG) == (
        "no container 999 on pve1 (pct: Configuration file 'nodes/pve1/lxc/999.conf' "
        "does not exist)",
        "check the inventory's vmid: pct list on pve1 shows its containers",
    )


def test_stopped_and_non_root_have_their_own_fix() -> None:
    stopped = refusal(255, b"container '999' not running!\n")
    assert stopped == (
        "CT 999 on pve1 is not running (pct: container '999' not running!)",
        "start it on pve1 with: /usr/sbin/pct start 999",
    )
    noisy = b"Could not chdir to home directory /home/ops: No such file\nplease run as root\n"
    assert refusal(255, noisy) == (
        "pct on pve1 needs root (pct: please run as root)",
        "log in to pve1 as root, or set become: sudo for it in the inventory",
    )


@pytest.mark.parametrize(
    ("code", "stderr"),
    [
        (0, NO_CONFIG),  # the command succeeded, whatever it printed
        (126, NO_CONFIG),  # lxc-attach could not run the command: the command's failure
        (127, NO_CONFIG),
        (2, b"ls: cannot access 'x': No such file or directory\n"),
        (2, NO_CONFIG + b"and then the command's own line\n"),
        (1, b"warning: please run as root next time\n"),
    ],
)
def test_a_commands_own_failure_is_left_to_the_caller(code: int, stderr: bytes) -> None:
    assert refusal(code, stderr) is None
