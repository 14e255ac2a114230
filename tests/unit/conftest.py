"""Unit tests start no process and open no socket: anything that tries fails here, so a
test that needs one goes to tests/local/ (this machine) or tests/lab/ (the lab)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator

import pytest


def _refuse(what: str) -> object:
    def refused(*_args: object, **_kwargs: object) -> None:
        raise AssertionError(f"a unit test {what}: move it to tests/local/ or tests/lab/")

    return refused


@pytest.fixture(autouse=True)
def no_processes_no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("started a process"))
    monkeypatch.setattr(os, "fork", _refuse("forked"))
    monkeypatch.setattr(socket.socket, "connect", _refuse("opened a connection"))
    monkeypatch.setattr(socket.socket, "bind", _refuse("listened on a socket"))
    yield
