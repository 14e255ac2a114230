"""What every fleet body shares, one row per body, through in-memory connections: a
container that cannot be reached is that container's entry (the others are still
read) and the exit code says so; `--limit` reads only the containers it selects."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from fleets import Fleet, checked
from scripted import Unreachable, serving

from orchestrator.contract import Document, run_result
from orchestrator.fleet.logs import logs
from orchestrator.fleet.releases import releases
from orchestrator.fleet.status import status
from orchestrator.fleet.unlock import unlock
from orchestrator.fleet.verify import verify_remote

Body = Callable[[Fleet], tuple[Document, int]]

BODIES: dict[str, tuple[str, Body]] = {
    "status": ("Status", lambda f: status(f.inputs, f.connect)),
    "releases": ("Releases", lambda f: releases(f.inputs, f.connect)),
    "verify-config": ("Verify", lambda f: verify_remote(f.inputs, f.connect)),
    "unlock": ("Unlock", lambda f: unlock(f.inputs, f.connect)),
    "logs": ("Logs", lambda f: logs(f.inputs, 5, f.connect)),
}


@pytest.mark.parametrize("command", list(BODIES))
def test_an_unreachable_container_is_its_own_entry_and_exit_3(command: str) -> None:
    kind, body = BODIES[command]
    fleet = Fleet()
    fleet.deployed("ct129")
    fleet.transports["ct200"] = Unreachable("ct200")

    printed, code = body(fleet)

    document = checked(printed, kind)
    assert (code, document["result"]) == (3, "needs_attention")
    reached, unreached = document["targets"]
    assert reached["name"] == "ct129" and "error" not in reached
    assert unreached["name"] == "ct200" and "Connection refused" in unreached["error"]


@pytest.mark.parametrize("command", list(BODIES))
def test_the_limit_reads_only_the_containers_it_selects(command: str) -> None:
    kind, body = BODIES[command]
    fleet = Fleet()
    fleet.deployed("ct200")
    serving(fleet.containers["ct200"].transport, "qwen3.6-27b")
    fleet.transports["ct129"] = Unreachable("ct129")  # not selected: never asked
    limited = [p for p in fleet.inputs.plans if p.container == "ct200"]
    fleet.inputs = dataclasses.replace(fleet.inputs, plans=limited)

    printed, code = body(fleet)

    document: dict[str, Any] = checked(printed, kind)
    assert [t["name"] for t in document["targets"]] == ["ct200"]
    assert code != 3  # the unreachable container was not asked


@pytest.mark.parametrize("command", list(BODIES))
def test_every_body_names_the_playbook_it_read_for(command: str) -> None:
    kind, body = BODIES[command]

    printed, _ = body(Fleet())

    assert checked(printed, kind)["playbook"] == "qwen-dflash"


@pytest.mark.parametrize("reached", ["nothing deployed", "serving", "unreachable"])
@pytest.mark.parametrize("command", list(BODIES))
def test_every_body_says_its_exit_codes_word_as_its_result(command: str, reached: str) -> None:
    kind, body = BODIES[command]
    fleet = Fleet()
    if reached == "serving":
        fleet.deployed("ct200")
        serving(fleet.containers["ct200"].transport, "qwen3.6-27b")
    elif reached == "unreachable":
        fleet.transports["ct200"] = Unreachable("ct200")

    printed, code = body(fleet)

    assert checked(printed, kind)["result"] == run_result(code)
