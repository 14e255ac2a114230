"""transaction: the cases that run a real process (a shell, the CLI or a script); the
rest are unit tests in tests/unit/test_transaction.py."""

from __future__ import annotations

import json
import os
import subprocess
import time

from clocks import FakeClock
from scripted import serving
from transactions import setup, target_run

from orchestrator.container.lock import Owner
from orchestrator.drafters.kinds import get_kind
from orchestrator.playbook import Gate, Probe
from orchestrator.probes.context import ContextBucket

CAUSES = get_kind("dflash").failure_causes

FAST_GATE = Gate(
    min_drafts=50,
    probe=Probe(scrape_interval=0.02, concurrency=1, max_tokens=8, endpoints=["completions"]),
)
BUCKETS = [ContextBucket("short", 0, None, ("hello",))]


# -- the gate ------------------------------------------------------------------------------------


def dead_pid() -> int:
    done = subprocess.run(["true"], check=True)
    assert done.returncode == 0
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_dead_runs_lock_is_taken_over_and_its_ungated_switch_undone() -> None:
    playbook, plan, container = setup(served_name="old-name")
    container.gated_release("aaaaaaaaaaaa", "old-name")
    container.gated_release("bbbbbbbbbbbb", "old-name")
    container.links[container.layout.current] = "releases/bbbbbbbbbbbb"
    dead = Owner("run-dead", "ops", os.uname().nodename, dead_pid(), time.time())
    container.files[container.layout.lock_owner] = dead.to_json().encode()
    container.files[container.layout.journal] = json.dumps(
        {
            "run_id": "run-dead",
            "action": "deploy",
            "owner": str(dead),
            "from_release": "aaaaaaaaaaaa",
            "to_release": "bbbbbbbbbbbb",
            "step": "gate",
            "started": "t0",
            "updated": "t1",
        }
    ).encode()
    clock = FakeClock()
    serving(container.transport, "old-name", request_seconds=0.01, clock=clock)

    outcome = target_run(playbook, plan, container, clock=clock).rollback("aaaaaaaaaaaa")

    assert outcome.recovered is not None
    assert (outcome.recovered.run_id, outcome.recovered.back_on) == (
        "run-dead",
        "aaaaaaaaaaaa",
    )
    assert any("took over the deploy lock of run run-dead" in n for n in outcome.notes)
    assert any("recovered interrupted run run-dead" in n for n in outcome.notes)
    assert outcome.result == "unchanged"  # the recovery already put it back on aaaa...
    assert container.events[:4] == [
        "take over",
        "start releases/aaaaaaaaaaaa",
        "audit recover",
        "journal cleared",
    ]
    assert container.events[4:] == ["audit rollback", "unlock"]  # ...and the run names it
    assert container.layout.lock_owner not in container.files
