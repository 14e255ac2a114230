"""Shared fixtures: a real lab (sshd, pct and vLLM stand-ins) per test that needs one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import LabHandle, free_network

from orchestrator.lab.cluster import Lab, LabSpec
from orchestrator.lab.layout import pid_alive


@pytest.fixture
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LabHandle]:
    """A fresh default lab (one host, a pct and a direct-SSH container), torn down by PID.
    Indirect parametrization gives other LabSpec fields (e.g. {"vllm_version": "0.19.1"})."""
    the_lab = Lab(tmp_path / "lab")
    spec = {"load_seconds": 0.3, "network": free_network(), **getattr(request, "param", {})}
    the_lab.up(LabSpec(**spec))
    env = {
        **os.environ,
        "ORCH_STATE_DIR": str(tmp_path / "state"),
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }
    try:
        yield LabHandle(the_lab, env)
    finally:
        stopped = the_lab.down()
        assert all(not pid_alive(pid) for pid in stopped)
