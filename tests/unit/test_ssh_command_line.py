"""The command line a session runs: quoted once, and never ending before its input
(tests/lab/test_sessions.py runs both forms on the lab's sshd)."""

from __future__ import annotations

from orchestrator.transport.ssh import command_line


def test_without_input_the_command_reads_dev_null() -> None:
    assert command_line(["echo", "a b", "$HOME"], False) == "echo 'a b' '$HOME' </dev/null"


def test_with_input_the_shell_drains_it_and_exits_with_the_commands_status() -> None:
    assert command_line(["sh", "-c", "exit 3"], True) == (
        "sh -c 'exit 3'; status=$?; cat >/dev/null; exit $status"
    )
