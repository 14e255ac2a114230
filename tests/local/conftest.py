"""Fixtures of the local tests on the stand-ins: the stand-in servers a test started,
stopped by PID at its end; a container's directories; a drafter deployed in them
(tests/standins.py builds them)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from standins import DRAFTER_NAME, RENDERED, build_container, deploy_drafter, stop_by_pid

from orchestrator.lab.paths import ContainerPaths


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    """Stand-in servers a test started; killed by PID if still running at the end."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        stop_by_pid(process)


@pytest.fixture
def container(tmp_path: Path) -> ContainerPaths:
    return build_container(tmp_path)


@pytest.fixture
def drafter(container: ContainerPaths) -> Path:
    return deploy_drafter(container, "r1", RENDERED, DRAFTER_NAME)
