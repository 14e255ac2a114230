"""A host's worth of containers at once on the lab's stock sshd (MaxSessions 10,
MaxStartups 10:30:100): 16 pct containers of one host deployed 16 at a time, over more
than one SSH connection to it when its first one has no session free."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import LabHandle, free_network

from orchestrator.lab.cluster import Lab, LabSpec

# 16 deploys over one connection: run alone (scripts/test), not beside parallel workers.
pytestmark = [pytest.mark.lab, pytest.mark.alone]

CONTAINERS = 16


@pytest.fixture
def pct_host(tmp_path: Path) -> Iterator[LabHandle]:
    """One host with 16 containers, all reached by pct, sshd at OpenSSH's defaults."""
    lab = Lab(tmp_path / "lab")
    lab.up(
        LabSpec(
            containers_per_host=CONTAINERS,
            load_seconds=0.3,
            network=free_network(),
            direct_ssh=False,
        )
    )
    env = {**os.environ, "ORCH_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1"}
    try:
        yield LabHandle(lab, env)
    finally:
        lab.down()


def test_sixteen_pct_containers_of_one_host_at_parallel_16(pct_host: LabHandle) -> None:
    result = pct_host.orch(
        "deploy",
        "qwen-dflash",
        "-i",
        str(pct_host.inventory),
        "--json",
        "--set",
        "rollout.canary=0",
        "--set",
        "rollout.parallel=100%",
        # Sessions, not speed: sixteen gates' speed levels at once on two cores measure
        # only the machine, and would spend the gates' time budget doing it.
        "--set",
        "gate.speed.enabled=false",
        timeout=900,
    )
    assert result.code == 0, str(result)
    document = result.json
    assert [t["result"] for t in document["targets"]] == ["deployed"] * CONTAINERS
    (wave,) = document["rollout"]["waves"]
    assert (document["rollout"]["parallel"], wave["results"]) == (16, {"deployed": 16})
    (pve1,) = document["connections"]
    assert (pve1["endpoint"], pve1["max_sessions"]) == ("pve1", 10)
    assert 2 <= pve1["connections"] <= 5  # half of MaxStartups' start, 10
    assert pve1["peak_sessions"] > 10
    log = Path(pct_host.lab.nodes()[0].log).read_text()
    assert log.count("Accepted publickey") == pve1["connections"]
    assert log.count("no more sessions") == pve1["refused"]  # each tried again
