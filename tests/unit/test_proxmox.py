"""What orch reads from a Proxmox host, case by case: each file under
tests/fixtures/proxmox/facts/BUILDER/ gives a builder's arguments, the argv it must
build, the output the tool printed (recorded) and the fact its parser must give, or the
error it must raise. A new case is a new file, no code."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pvenodes import FIXTURES

from orchestrator import proxmox
from orchestrator.errors import NeedsAttention

FACTS = FIXTURES / "facts"
PARSERS: dict[str, Callable[..., Any]] = {
    "tool_paths": proxmox.parse_tool_paths,
    "cluster_resources": proxmox.parse_resources,
    "cluster_status": proxmox.parse_cluster_status,
    "guest_config": proxmox.parse_guest_config,
    "guest_interfaces": proxmox.parse_interfaces,
    "node_gpus": proxmox.parse_node_gpus,
    "container_status": proxmox.parse_container_status,
    "sshd_limits": proxmox.parse_sshd_limits,
}
CASES = sorted(FACTS.glob("*/*.json"))


def as_data(fact: object) -> object:
    """A fact as its case file writes it: dataclasses as objects, tuples as lists."""
    if isinstance(fact, list):
        fact = [dataclasses.asdict(item) for item in fact]
    elif dataclasses.is_dataclass(fact) and not isinstance(fact, type):
        fact = dataclasses.asdict(fact)
    return json.loads(json.dumps(fact))


@pytest.mark.parametrize("path", CASES, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_a_recorded_output_gives_its_fact(path: Path) -> None:
    case = json.loads(path.read_text())
    concern = path.parent.name
    argv = getattr(proxmox, concern)(**case["args"])
    assert argv == case["command"]
    assert argv.concern == concern  # type: ignore[attr-defined]  # an in-memory host answers by it
    output = case["output"] if "output" in case else (FIXTURES / case["output_file"]).read_text()
    parse = functools.partial(PARSERS[concern], **case.get("parse_with", {}))
    if "error" in case:
        with pytest.raises(NeedsAttention, match=re.escape(case["error"])):
            parse(output)
    else:
        assert as_data(parse(output)) == case["fact"]


def test_every_reading_has_its_cases() -> None:
    """A builder without a case file is read untested; a case folder without a builder is
    a case of nothing."""
    assert {path.parent.name for path in CASES} == set(PARSERS)
