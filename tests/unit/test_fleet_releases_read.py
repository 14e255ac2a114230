"""`orch releases` through in-memory connections, as a table: the runs the containers'
audit logs record, newest first, and where each left its release now."""

from __future__ import annotations

import pytest
from fleets import RUN_A, RUN_B, Fleet, checked
from scripted import Unreachable

from orchestrator.fleet.releases import releases

OLD, NEW = "aaaaaaaaaaaa", "bbbbbbbbbbbb"


def runs_of(fleet: Fleet, pruned: bool = False) -> None:
    """Run A left release OLD current, run B then NEW; with `pruned`, OLD is gone."""
    for name, container in fleet.containers.items():
        fleet.deployed(name, RUN_A, OLD)
        fleet.deployed(name, RUN_B, NEW)
        if pruned:
            old_dir = fleet.plans[name].layout.release(OLD)
            container.files = {
                path: data for path, data in container.files.items() if not path.startswith(old_dir)
            }


@pytest.mark.parametrize(
    ("runs", "pruned", "left_on"),
    [
        (0, False, []),
        (1, False, [(RUN_A, OLD, "current")]),
        (2, False, [(RUN_B, NEW, "current"), (RUN_A, OLD, "kept")]),
        (2, True, [(RUN_B, NEW, "current"), (RUN_A, OLD, "pruned")]),
    ],
)
def test_releases_lists_each_run_and_where_its_release_is_now(
    runs: int, pruned: bool, left_on: list[tuple[str, str, str]]
) -> None:
    fleet = Fleet()
    if runs == 1:
        for name in fleet.plans:
            fleet.deployed(name, RUN_A, OLD)
    elif runs == 2:
        runs_of(fleet, pruned)

    printed, code = releases(fleet.inputs, fleet.connect)

    document = checked(printed, "Releases")
    assert (code, document["result"]) == (0, "ok")
    listed = [
        (run["run_id"], target["release"], target["release_state"])
        for run in document["runs"]
        for target in run["targets"]
    ]
    assert listed == [entry for entry in left_on for _ in fleet.plans]
    kept = {OLD, NEW} - ({OLD} if pruned else set()) if runs == 2 else ({OLD} if runs else set())
    for target in document["targets"]:
        assert {k["release"] for k in target["kept"]} == kept
        assert target["current"] == (left_on[0][1] if left_on else None)


def test_releases_of_an_unreachable_container_is_its_entry_and_exit_3() -> None:
    fleet = Fleet()
    fleet.deployed("ct129", RUN_A, OLD)
    fleet.transports["ct200"] = Unreachable("ct200")

    printed, code = releases(fleet.inputs, fleet.connect)

    document = checked(printed, "Releases")
    assert (code, document["result"]) == (3, "needs_attention")
    assert [t["result"] for t in document["targets"]] == ["ok", "unreachable"]
    assert [(r["run_id"], [t["name"] for t in r["targets"]]) for r in document["runs"]] == [
        (RUN_A, ["ct129"])
    ]
