"""Secrets read from a command: these start the command, a process on this machine."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from secretbooks import book
from shelltools import running, wait_until

from orchestrator import secrets
from orchestrator.errors import InputError


def test_each_source_is_read_and_a_missing_one_named_with_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "key").write_text("from-file\n")
    monkeypatch.setenv("K", "from-env")
    playbook = book(
        tmp_path,
        f"{{A: {{env: K}}, B: {{file: {tmp_path}/key}}, "
        f"C: {{command: [{sys.executable}, -c, 'print(\"from-command\")']}}}}",
    )
    assert secrets.resolve(playbook) == {  # type: ignore[arg-type]
        "A": "from-env",
        "B": "from-file",
        "C": "from-command",
    }
    monkeypatch.delenv("K")
    with pytest.raises(InputError, match=r"server.secrets.A: environment variable K is not set"):
        secrets.resolve(playbook)  # type: ignore[arg-type]
    monkeypatch.setenv("K", "")
    with pytest.raises(InputError, match=r"server.secrets.A: environment variable K is empty"):
        secrets.resolve(playbook)  # type: ignore[arg-type]


def test_a_failing_command_is_named_without_its_output(tmp_path: Path) -> None:
    failing = f"{{command: [{sys.executable}, -c, 'print(\"p4rt\" * 2); raise SystemExit(3)']}}"
    with pytest.raises(InputError) as caught:
        secrets.resolve(book(tmp_path, f"{{A: {failing}}}"))  # type: ignore[arg-type]
    assert "server.secrets.A: command" in str(caught.value)
    assert "exited 3" in str(caught.value)
    assert "p4rtp4rt" not in str(caught.value)


# -- bounded sources (issue 35 cause 8) ---------------------------------------------------------


def within(seconds: float, resolve: Callable[[], object]) -> BaseException | object:
    """What `resolve` returned or raised, failing the test if it took over `seconds`
    (it is left running in a daemon thread: a source that hangs must not hang the suite)."""
    outcome: list[BaseException | object] = []

    def call() -> None:
        try:
            outcome.append(resolve())
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(seconds)
    assert outcome, f"still reading the source after {time.monotonic() - started:.1f} s"
    return outcome[0]


def refused(tmp_path: Path, source: str, seconds: float = 5.0) -> str:
    """The InputError's message for a source that must be refused within `seconds`."""
    playbook = book(tmp_path, f"{{A: {source}}}")
    error = within(seconds, lambda: secrets.resolve(playbook))  # type: ignore[arg-type]
    assert isinstance(error, InputError), error
    assert str(error).startswith(f"{tmp_path}/p.yaml: server.secrets.A: ")
    return str(error)


def test_a_fifo_as_the_secret_file_is_refused_without_waiting_for_a_writer(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    assert f"{fifo} is a FIFO, not a regular file" in refused(tmp_path, f"{{file: {fifo}}}")


def test_a_device_or_a_directory_as_the_secret_file_is_refused_unread(tmp_path: Path) -> None:
    assert "/dev/zero is a device, not a regular file" in refused(tmp_path, "{file: /dev/zero}")
    assert f"{tmp_path} is a directory" in refused(tmp_path, f"{{file: {tmp_path}}}")


def test_a_secret_file_over_the_cap_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "key"
    big.write_bytes(b"k" * (secrets.SOURCE_BYTES + 1))
    assert "holds more than 64 KiB" in refused(tmp_path, f"{{file: {big}}}")
    big.write_bytes(b"k" * secrets.SOURCE_BYTES)
    assert secrets.resolve(book(tmp_path, f"{{A: {{file: {big}}}}}")) == {  # type: ignore[arg-type]
        "A": "k" * secrets.SOURCE_BYTES
    }


def test_a_command_printing_without_end_is_cut_at_the_cap_and_ended(tmp_path: Path) -> None:
    endless = f"{{command: [{sys.executable}, -c, 'while True: print(\"x\" * 4096)']}}"
    assert "printed more than 64 KiB (ended)" in refused(tmp_path, endless)


def test_a_command_past_its_deadline_is_ended_with_the_child_holding_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(secrets, "COMMAND_SECONDS", 1.0)
    child = tmp_path / "child.pid"
    hangs = f"{{command: [sh, -c, 'sleep 60 & echo $! > {child}; exec sleep 60']}}"

    message = refused(tmp_path, hangs, seconds=4.0)

    assert "did not finish within 1 s (its process group was ended)" in message
    wait_until(lambda: not running(int(child.read_text())))


def test_a_command_that_printed_its_value_is_not_held_up_by_a_child_it_left(
    tmp_path: Path,
) -> None:
    child = tmp_path / "child.pid"
    leaves = f"{{command: [sh, -c, 'sleep 60 & echo $! > {child}; echo the-value']}}"
    playbook = book(tmp_path, f"{{A: {leaves}}}")

    assert within(4.0, lambda: secrets.resolve(playbook)) == {"A": "the-value"}  # type: ignore[arg-type]
    wait_until(lambda: not running(int(child.read_text())))


def test_a_failing_commands_stderr_is_never_quoted(tmp_path: Path) -> None:
    says = """{command: [sh, -c, 'printf "sk-%s-4f9a" live >&2; exit 3']}"""
    message = refused(tmp_path, says)
    assert "exited 3; its stderr (12 bytes) is not shown" in message
    assert "sk-live" not in message
