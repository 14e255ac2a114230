"""The fleet commands on scripted containers (tests/scripted.py): status, unlock,
releases, verify-config, rollback --to and the JSON contract of their documents,
through the same operations the CLI runs, with in-memory connections. No process,
no network: the lab keeps the end-to-end stories."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from clocks import FakeClock
from fleets import (
    EXAMPLE,
    FAST,
    PLAYBOOK,
    RUN_A,
    RUN_B,
    Fleet,
    by_name,
    checked,
    with_models,
    write_models,
)
from scripted import Unreachable, serving

from orchestrator.cancel import Cancel
from orchestrator.container.audit import audit_line
from orchestrator.container.lock import Owner
from orchestrator.contract import jsonable
from orchestrator.errors import InputError
from orchestrator.fleet.releases import releases
from orchestrator.fleet.runs import rollback
from orchestrator.fleet.status import status
from orchestrator.fleet.unlock import unlock
from orchestrator.fleet.verify import verify_remote
from orchestrator.layout import DRAFTER_CONFIG
from orchestrator.progress import no_progress
from orchestrator.report import tables
from orchestrator.transaction.options import Options

# -- status ------------------------------------------------------------------------------------


def test_status_before_anything_is_deployed_is_a_state_not_an_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = Fleet()

    printed, code = status(fleet.inputs, fleet.connect)

    assert code == 0
    document = checked(printed, "Status")
    assert (document["result"], document["state"]) == ("ok", "nothing_deployed")
    for target in document["targets"]:
        assert (target["state"], target["release"], target["health"], target["lock"]) == (
            "nothing_deployed",
            None,
            None,
            None,
        )
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    tables.print_status(printed, fleet.inputs.deploy_command())
    shown = capsys.readouterr().out
    # the hint is a command to paste: the real inventory path, not -i INVENTORY
    assert f"nothing deployed yet: orch deploy {PLAYBOOK} -i {EXAMPLE}\n" in shown
    assert not re.search(r"\bnull\b|\bNone\b", shown)


def test_status_names_the_release_the_last_gate_the_lock_and_an_unreachable_host() -> None:
    fleet = Fleet()
    rid = fleet.deployed("ct200")
    serving(fleet.containers["ct200"].transport, "qwen3.6-27b")
    owner = Owner("run-x", "alice", "laptop", 99, 1_700_000_000.0)
    fleet.containers["ct200"].files[fleet.plans["ct200"].layout.lock_owner] = (
        owner.to_json().encode()
    )
    fleet.transports["ct129"] = Unreachable("pve-kpro5")

    printed, code = status(fleet.inputs, fleet.connect)

    assert code == 3
    document = checked(printed, "Status")
    targets = by_name(document)
    assert (document["result"], document["state"]) == ("needs_attention", "unreachable")
    dynamic = {"last_run": None, "release_gate": None, "deploying": None}
    assert targets["ct200"] | dynamic == {
        "name": "ct200",
        "host": "pve-train",
        "release": rid,
        "server": "running",
        "pid": 4242,
        "last_run": None,
        "lock": {
            "run_id": "run-x",
            "user": "alice",
            "control_host": "laptop",
            "pid": 99,
            "since": "2023-11-14T22:13:20+00:00",
            "lease": None,  # a lock written by an older orch: judged on the default lease
            "boot_id": None,
            "pid_start": None,
        },
        "release_gate": None,
        "deploying": None,
        "interrupted": None,
        "health": 200,
        "state": "deploying",  # alice's run on another machine may be at work: not a fault
    }
    assert targets["ct200"]["last_run"]["run_id"] == RUN_A
    assert targets["ct200"]["release_gate"]["result"] == "pass"
    assert targets["ct200"]["deploying"]["owner"] == "alice@laptop"
    assert targets["ct129"]["state"] == "unreachable"
    assert targets["ct129"]["error"] == "pve-kpro5: connect: Connection refused"


def test_an_interrupted_switch_is_the_first_thing_status_says() -> None:
    fleet = Fleet()
    fleet.deployed("ct129")
    layout = fleet.plans["ct129"].layout
    fleet.containers["ct129"].files[layout.journal] = json.dumps(
        {
            "run_id": "run-dead",
            "action": "deploy",
            "owner": "ops@ctl pid 1",
            "from_release": None,
            "to_release": "abc",
            "step": "wait ready",
            "started": "t0",
            "updated": "t1",
        }
    ).encode()

    printed, code = status(fleet.inputs, fleet.connect)
    document = jsonable(printed)

    assert code == 3
    assert by_name(document)["ct129"]["state"] == "interrupted"
    assert "run run-dead (deploy nothing -> abc" in by_name(document)["ct129"]["interrupted"]
    assert document["state"] == "interrupted"


def journal_of(run_id: str, step: str) -> bytes:
    return json.dumps(
        {"run_id": run_id, "action": "deploy", "owner": "ops@ctl pid 1", "from_release": None,
         "to_release": "abc", "step": step, "started": "t0", "updated": "t1"}
    ).encode()  # fmt: skip


def test_a_live_run_is_deploying_and_exits_0_a_dead_one_is_interrupted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's deploy mid-switch is `deploying` (run, step, owner); the same
    journal under a lock whose process on this machine is gone is `interrupted`."""
    fleet = Fleet()
    fleet.deployed("ct200")
    layout, files = fleet.plans["ct200"].layout, fleet.containers["ct200"].files
    serving(fleet.containers["ct200"].transport, "qwen3.6-27b")
    files[layout.lock_owner] = Owner.me("run-live", "root").to_json().encode()
    files[layout.journal] = journal_of("run-live", "wait ready")

    printed, code = status(fleet.inputs, fleet.connect)

    document = checked(printed, "Status")
    assert (code, document["result"], document["state"]) == (0, "ok", "deploying")
    target = by_name(document)["ct200"]
    assert (target["state"], target["interrupted"]) == ("deploying", None)
    assert target["deploying"]["run_id"] == "run-live"
    assert target["deploying"]["step"] == "wait ready"
    monkeypatch.setenv("COLUMNS", "200")
    tables.print_status(printed)
    assert "ct200: deploying: run run-live by root@" in capsys.readouterr().out

    here = Owner.me("run-live", "root")
    dead = dataclasses.replace(here, pid=2**22 + 7)  # above Linux's pid_max: no such process
    files[layout.lock_owner] = dead.to_json().encode()
    printed, code = status(fleet.inputs, fleet.connect)
    document = jsonable(printed)
    assert (code, by_name(document)["ct200"]["state"]) == (3, "interrupted")


def test_status_shows_the_gate_that_admitted_the_current_release_apart_from_the_last_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed deploy rolled back: GATE is the re-gate that kept the release
    (4.18), LAST RUN the rollback of the attempted one, whose gate said 1.11."""
    fleet = Fleet()
    kept = fleet.deployed("ct200")
    tried = "536fae0d5d06"
    fleet.containers["ct200"].audit(
        audit_line(RUN_B, "ops", "deploy", {
            "result": "rolled_back", "release": tried, "previous_release": kept,
            "current": kept, "gate": {"verdict": "fail", "mean_acceptance_length": 1.11},
            "rollback_gate": {"verdict": "pass", "mean_acceptance_length": 4.18}})
    )  # fmt: skip
    serving(fleet.containers["ct200"].transport, "qwen3.6-27b")

    printed, _ = status(fleet.inputs, fleet.connect)
    document = jsonable(printed)

    target = by_name(document)["ct200"]
    assert (target["release"], target["release_gate"]["run_id"]) == (kept, RUN_B)
    assert target["release_gate"]["mean_acceptance_length"] == 4.18
    assert (target["last_run"]["release"], target["last_run"]["result"]) == (tried, "rolled_back")
    monkeypatch.setenv("COLUMNS", "250")
    tables.print_status(printed)
    [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ct200")]
    assert re.search(rf"{kept} +running pid 4242 +ok +pass +4\.18 +deploy rolled back {tried}", row)
    assert "1.11" not in row


# -- unlock ------------------------------------------------------------------------------------


def test_unlock_removes_each_lock_and_says_whose_it_was() -> None:
    fleet = Fleet()
    layout = fleet.plans["ct200"].layout
    owner = Owner("run-x", "alice", "laptop", 99, 1_700_000_000.0)
    fleet.containers["ct200"].files[layout.lock_owner] = owner.to_json().encode()
    fleet.containers["ct129"].files[fleet.plans["ct129"].layout.lock_owner] = b"not json"
    for container in fleet.containers.values():
        container.heartbeat_age = 3600  # both runs gone: silent beyond the default lease

    printed, code = unlock(fleet.inputs, fleet.connect)

    assert code == 0
    document = checked(printed, "Unlock")
    targets = by_name(document)
    assert targets["ct200"]["removed_lock"]["run_id"] == "run-x"
    assert targets["ct129"]["removed_lock"] == {"text": "not json"}
    assert layout.lock_owner not in fleet.containers["ct200"].files
    assert fleet.containers["ct200"].events == ["unlock"]


def test_unlock_of_an_unreachable_container_is_its_error_not_the_runs_end() -> None:
    fleet = Fleet()
    fleet.transports["ct200"] = Unreachable("pve-train")

    printed, code = unlock(fleet.inputs, fleet.connect)
    document = jsonable(printed)

    assert code == 3
    targets = by_name(document)
    assert (targets["ct129"]["result"], targets["ct129"]["removed_lock"]) == ("ok", None)
    assert targets["ct200"]["result"] == "error"
    assert "Connection refused" in targets["ct200"]["error"]


# -- releases and rollback --to ----------------------------------------------------------------


def two_runs(fleet: Fleet) -> tuple[str, str]:
    """RUN_A left both containers on release a, RUN_B moved ct200 on to b."""
    fleet.deployed("ct129", RUN_A, "a" * 12)
    fleet.deployed("ct200", RUN_A, "a" * 12)
    fleet.deployed("ct200", RUN_B, "b" * 12)
    return "a" * 12, "b" * 12


def test_releases_lists_runs_newest_first_with_the_release_each_left() -> None:
    fleet = Fleet()
    a, b = two_runs(fleet)

    printed, code = releases(fleet.inputs, fleet.connect)

    assert code == 0
    document = checked(printed, "Releases")
    assert [r["run_id"] for r in document["runs"]] == [RUN_B, RUN_A]
    newest, oldest = document["runs"]
    assert newest["targets"] == [
        {"name": "ct200", "result": "deployed", "release": b, "release_state": "current"}
    ]
    assert {t["name"]: t["release_state"] for t in oldest["targets"]} == {
        "ct129": "current",
        "ct200": "kept",
    }
    kept = by_name(document)["ct200"]["kept"]
    assert [(k["release"], k["current"], k["made_by_run"]) for k in kept] == [
        (b, True, RUN_B),
        (a, False, RUN_A),
    ]


def test_rollback_to_a_run_switches_each_container_back_and_gates_it() -> None:
    fleet = Fleet(*FAST)
    a, _ = two_runs(fleet)
    for container in fleet.containers.values():
        serving(container.transport, "qwen3.6-27b")
    options = Options(run_id="run-back", user="ops")

    run, code = rollback(
        fleet.inputs, options, RUN_A[:12], fleet.connect, no_progress, Cancel(), FakeClock()
    )

    assert code == 0, run
    document = checked(run, "RollbackRun")
    assert document["to"] == {"query": RUN_A[:12], "run_id": RUN_A, "release": None}
    targets = by_name(document)
    assert (targets["ct129"]["result"], targets["ct129"]["current"]) == ("unchanged", a)
    assert (targets["ct200"]["result"], targets["ct200"]["current"]) == ("rolled_back", a)
    assert targets["ct200"]["gate"]["verdict"] == "pass"
    ct200 = fleet.containers["ct200"]
    assert ct200.links[ct200.layout.current] == f"releases/{a}"
    assert ct200.events[-3:] == ["audit rollback", "journal cleared", "unlock"]


def test_rollback_to_an_unknown_id_is_bad_input_with_nothing_touched() -> None:
    fleet = Fleet()
    two_runs(fleet)
    before = {name: dict(c.files) for name, c in fleet.containers.items()}

    with pytest.raises(InputError, match="no run or release has this id"):
        rollback(
            fleet.inputs,
            Options(run_id="run-back", user="ops"),
            "zzz",
            fleet.connect,
            no_progress,
            Cancel(),
        )

    assert {name: c.files for name, c in fleet.containers.items()} == before


# -- verify-config -----------------------------------------------------------------------------


@pytest.fixture
def models(tmp_path: Path) -> dict[str, Path]:
    return write_models(tmp_path)


def test_verify_config_before_the_first_deploy_says_nothing_deployed() -> None:
    fleet = Fleet()

    printed, code = verify_remote(fleet.inputs, fleet.connect)

    assert code == 0
    document = checked(printed, "Verify")
    assert [(t["result"], t["state"]) for t in document["targets"]] == [
        ("ok", "nothing_deployed")
    ] * 2


def test_verify_config_finds_a_hand_edit_since_the_run_that_applied_it(
    models: dict[str, Path],
) -> None:
    fleet = Fleet()
    with_models(fleet, models)
    fleet.deployed("ct129")
    rid = fleet.deployed("ct200")
    config = f"{fleet.plans['ct200'].layout.release(rid)}/{DRAFTER_CONFIG}"
    edited = json.loads(fleet.containers["ct200"].files[config])
    edited["target_layer_ids"] = [1, 17, 33, 49, 63]
    fleet.containers["ct200"].files[config] = json.dumps(edited).encode()

    printed, code = verify_remote(fleet.inputs, fleet.connect)

    assert code == 1
    document = checked(printed, "Verify")
    targets = by_name(document)
    assert (targets["ct129"]["result"], targets["ct129"]["changed_on_target"]) == ("ok", [])
    assert targets["ct200"]["result"] == "drift"
    [changed] = targets["ct200"]["changed_on_target"]
    assert changed.startswith(f"changed on the target since run {RUN_A}: config.json: SHA-256")
    assert "target_layer_ids" in changed
    assert targets["ct200"]["applied"]["run_id"] == RUN_A


def test_verify_config_shows_what_the_playbook_now_renders_differently(
    models: dict[str, Path],
) -> None:
    fleet = Fleet()
    with_models(fleet, models)
    fleet.deployed("ct129")
    fleet.deployed("ct200")
    changed = Fleet("server.max_model_len=16384")
    changed.transports = fleet.transports

    printed, code = verify_remote(changed.inputs, changed.connect)
    document = jsonable(printed)

    assert code == 0
    target = by_name(document)["ct200"]
    assert target["result"] == "ok"
    [differs] = target["playbook_differs"]
    assert differs.startswith(f"serve.sh: the playbook now differs from what run {RUN_A}")
    assert "+  --max-model-len 16384" in differs
    assert target["apply_with"].endswith("--limit ct200 --set server.max_model_len=16384")
