"""Secrets read from a command: these start the command, a process on this machine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from secretbooks import book

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
