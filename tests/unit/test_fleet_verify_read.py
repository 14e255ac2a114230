"""`orch verify-config PLAYBOOK` through in-memory connections, as a table: each row
scripts one state of the current release on every container and the playbook as it
is now, and checks what the body says drifted (by hand on the target) and what the
playbook now renders differently."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fleets import RUN_A, Fleet, checked, with_models, write_models

from orchestrator.fleet.verify import verify_remote
from orchestrator.layout import LAUNCH_SCRIPT
from orchestrator.release import MANIFEST

Setup = Callable[[Fleet, str], None]


def release_file(fleet: Fleet, name: str, file: str) -> str:
    plan = fleet.plans[name]
    return f"{plan.layout.release(plan.release_id)}/{file}"


def nothing(fleet: Fleet, name: str) -> None:
    """Nothing deployed."""


def deployed(fleet: Fleet, name: str) -> None:
    fleet.deployed(name)


def edited(fleet: Fleet, name: str) -> None:
    fleet.deployed(name)
    fleet.containers[name].files[release_file(fleet, name, LAUNCH_SCRIPT)] += b"# by hand\n"


def deleted(fleet: Fleet, name: str) -> None:
    fleet.deployed(name)
    del fleet.containers[name].files[release_file(fleet, name, LAUNCH_SCRIPT)]


def no_manifest(fleet: Fleet, name: str) -> None:
    fleet.deployed(name)
    del fleet.containers[name].files[release_file(fleet, name, MANIFEST)]


def torn_manifest(fleet: Fleet, name: str) -> None:
    fleet.deployed(name)
    fleet.containers[name].files[release_file(fleet, name, MANIFEST)] = b"{torn"


def edited_without_manifest(fleet: Fleet, name: str) -> None:
    edited(fleet, name)
    del fleet.containers[name].files[release_file(fleet, name, MANIFEST)]


THEN, NOW = ["server.max_model_len=8192"], ["server.max_model_len=16384"]


@pytest.mark.parametrize(
    ("setup", "now", "result", "code", "changed", "differs"),
    [
        (nothing, THEN, "ok", 0, "", ""),
        (deployed, THEN, "ok", 0, "", ""),
        (edited, THEN, "drift", 1, f"changed on the target since run {RUN_A}: serve.sh: SHA", ""),
        (deleted, THEN, "drift", 1, f"since run {RUN_A}: serve.sh: missing on the target", ""),
        (no_manifest, THEN, "ok", 0, "", ""),
        (torn_manifest, THEN, "ok", 0, "", ""),
        (edited_without_manifest, THEN, "drift", 1, "no readable manifest, compared", ""),
        (deployed, NOW, "ok", 0, "", f"serve.sh: the playbook now differs from what run {RUN_A}"),
        (edited, NOW, "drift", 1, "changed on the target since", "serve.sh: the playbook now"),
    ],
)
def test_verify_config_of_a_fleet_in_one_state(
    tmp_path: Path,
    setup: Setup,
    now: list[str],
    result: str,
    code: int,
    changed: str,
    differs: str,
) -> None:
    applied = Fleet(*THEN)
    with_models(applied, write_models(tmp_path))
    for name in applied.plans:
        setup(applied, name)
    playbook_now = Fleet(*now)

    printed, exit_code = verify_remote(playbook_now.inputs, applied.connect)

    document = checked(printed, "Verify")
    assert (document["result"], exit_code) == ("ok" if code == 0 else "not_applied", code)
    for target in document["targets"]:
        assert target["result"] == result
        said = target.get("changed_on_target", [])
        assert [c for c in said if changed in c] if changed else said == []
        now_differs = target.get("playbook_differs", [])
        assert [d for d in now_differs if d.startswith(differs)] if differs else now_differs == []
        if differs:
            assert target["apply_with"].startswith("orch deploy ")
            assert "--set server.max_model_len=16384" in target["apply_with"]
