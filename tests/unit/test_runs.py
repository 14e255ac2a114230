"""Fleet runs from audit records: parsing, grouping, and what `rollback --to ID` means
for each container; the records read for real from a deployment dir; drift told apart
into hand edits and playbook changes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from auditruns import RUN_A, RUN_B, line

from orchestrator import release
from orchestrator.container.audit import AuditRecord, audit_line, parse_audit
from orchestrator.documents.fleet import Releases
from orchestrator.errors import InputError
from orchestrator.inventory import load_inventory
from orchestrator.plan import DRAFTER_CONFIG, LAUNCH_SCRIPT, VIEW_CONFIG, plan_deploy
from orchestrator.playbook import load_playbook
from orchestrator.release import Applied, Drift, GateTarget, drift
from orchestrator.report.tables import print_releases
from orchestrator.runs import (
    KeptRelease,
    TargetRecord,
    fleet_runs,
    resolve,
)

ROOT = Path(__file__).resolve().parent.parent.parent
PLAYBOOK = ROOT / "playbooks" / "qwen-dflash.yaml"
EXAMPLE = ROOT / "inventories" / "example.yaml"
RUN_C = "20261201T120000Z-cccccc"


def target(name: str, current: str | None, kept: Sequence[str], *lines: str) -> TargetRecord:
    return TargetRecord(
        name, current, [KeptRelease(r) for r in kept], parse_audit("\n".join(lines))
    )


def fleet() -> list[TargetRecord]:
    """Run A deployed a1/a2, run B deployed b1/b2 and was rolled back on ct2, run C
    touched only ct1 (unchanged)."""
    return [
        target(
            "ct1",
            "b1111111",
            ["a1111111", "b1111111"],
            line(RUN_A, "2026-12-01T10:00:05", "deploy", "deployed", "a1111111", "a1111111"),
            line(RUN_B, "2026-12-01T11:00:05", "deploy", "deployed", "b1111111", "b1111111"),
            line(RUN_C, "2026-12-01T12:00:05", "deploy", "unchanged", "b1111111", "b1111111"),
        ),
        target(
            "ct2",
            "a2222222",
            ["a2222222", "b2222222"],
            line(RUN_A, "2026-12-01T10:00:04", "deploy", "deployed", "a2222222", "a2222222"),
            line(RUN_B, "2026-12-01T11:00:09", "deploy", "rolled_back", "b2222222", "a2222222"),
        ),
    ]


def test_audit_lines_parse_skipping_torn_or_foreign_lines() -> None:
    written = audit_line(
        RUN_A, "ops", "deploy", {"result": "unchanged", "release": "r1", "current": "r1"}
    )
    records = parse_audit(
        "\n".join([written, '{"run_id": 5}', "not json", "[1]", '{"no": "id"}', '{"run_id": "x'])
    )
    assert records == [
        AuditRecord(RUN_A, json.loads(written)["time"], "ops", "deploy", "unchanged", "r1", "r1")
    ]


@pytest.mark.parametrize(
    ("action", "result", "left_on"),
    [
        ("deploy", "deployed", "new"),
        ("deploy", "rolled_back", "old"),
        ("rollback", "rolled_back", "new"),
        ("deploy", "failed", None),
    ],
)
def test_lines_without_current_are_read_by_their_outcome(
    action: str, result: str, left_on: str | None
) -> None:
    old_line = {
        "run_id": RUN_A,
        "action": action,
        "result": result,
        "release": "new",
        "previous_release": "old",
    }
    [record] = parse_audit(json.dumps(old_line))
    assert record.current == left_on


def test_runs_are_grouped_across_containers_newest_first() -> None:
    runs = fleet_runs(fleet())
    assert [r.run_id for r in runs] == [RUN_C, RUN_B, RUN_A]
    assert runs[2].time == "2026-12-01T10:00:04"  # its first decision, on ct2
    assert sorted(runs[1].targets) == ["ct1", "ct2"] and list(runs[0].targets) == ["ct1"]
    assert runs[1].targets["ct2"].current == "a2222222"


def test_a_recovery_and_the_runs_own_line_leave_the_last_as_its_result() -> None:
    [run] = fleet_runs(
        [
            target(
                "ct1",
                "b",
                ["a", "b"],
                line(RUN_B, "t1", "recover", "recovered", "a", "a"),
                line(RUN_B, "t2", "deploy", "deployed", "b", "b"),
            )
        ]
    )
    assert (run.action, run.targets["ct1"].current, run.time) == ("deploy", "b", "t1")


def test_a_run_id_or_its_prefix_names_each_containers_release() -> None:
    for query in (RUN_A, "20261201T10", " 20261201T1000 "):
        resolution = resolve(query, fleet())
        assert resolution.run_id == RUN_A and resolution.release is None
        assert resolution.wanted == {"ct1": "a1111111", "ct2": "a2222222"}
        assert resolution.skipped == {}


def test_a_container_the_run_did_not_touch_is_skipped() -> None:
    resolution = resolve(RUN_C, fleet())
    assert resolution.wanted == {"ct1": "b1111111"}
    assert resolution.skipped == {"ct2": f"run {RUN_C} did not touch ct2"}


def test_a_rolled_back_run_restores_what_it_left_serving() -> None:
    assert resolve(RUN_B, fleet()).wanted == {"ct1": "b1111111", "ct2": "a2222222"}


def test_a_release_id_stands_for_the_first_run_that_left_it_current() -> None:
    resolution = resolve("b111", fleet())
    assert (resolution.run_id, resolution.release) == (RUN_B, "b1111111")
    assert resolution.wanted == {"ct1": "b1111111", "ct2": "a2222222"}
    assert resolve("a2222222", fleet()).run_id == RUN_A


def test_a_kept_release_no_run_names_is_switched_to_where_it_is_kept() -> None:
    resolution = resolve("b2222222", fleet())  # only a rolled back attempt made it
    assert (resolution.run_id, resolution.release) == (None, "b2222222")
    assert resolution.wanted == {"ct2": "b2222222"}
    assert resolution.skipped == {"ct1": "release b2222222 is not on ct1"}


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("2026", f"ambiguous, it begins 3 ids: run {RUN_C}, run {RUN_B}, run {RUN_A}"),
        ("a", "ambiguous, it begins 2 ids: release a1111111, release a2222222"),
        ("ffff", "no run or release has this id (newest runs: " + RUN_C),
        ("  ", "give a run id or a release id"),
    ],
)
def test_an_ambiguous_or_unknown_id_is_bad_input(query: str, words: str) -> None:
    with pytest.raises(InputError, match=words.replace("(", r"\(")) as caught:
        resolve(query, fleet())
    assert caught.value.exit_code == 2


def test_a_run_whose_release_was_pruned_is_refused_before_any_switch() -> None:
    records = fleet()
    records[0] = TargetRecord("ct1", "b1111111", [KeptRelease("b1111111")], records[0].records)
    with pytest.raises(InputError, match="ct1: a1111111 \\(kept: b1111111\\)"):
        resolve(RUN_A, records)


def test_the_manifest_records_what_was_applied() -> None:
    playbook = load_playbook(PLAYBOOK, ["server.max_model_len=8192"])
    [plan, *_] = plan_deploy(playbook, load_inventory(EXAMPLE))
    raw = release.manifest(plan, playbook, RUN_A, [], GateTarget.of(playbook))
    document = json.loads(raw)
    assert document["assignments"] == ["server.max_model_len=8192"]
    assert document["playbook_path"] == str(PLAYBOOK)
    assert document["playbook_sha256"] == release.sha256(PLAYBOOK.read_bytes())
    applied = Applied.parse(raw)
    assert applied is not None and applied.run_id == RUN_A
    assert applied.files[VIEW_CONFIG] == applied.files[DRAFTER_CONFIG]
    assert applied.files[LAUNCH_SCRIPT] == release.sha256(plan.files[LAUNCH_SCRIPT])
    assert Applied.parse(b"{torn") is None and Applied.parse(None) is None


def test_drift_tells_a_hand_edit_from_a_changed_playbook() -> None:
    inventory = load_inventory(EXAMPLE)
    applied_book = load_playbook(PLAYBOOK, ["server.max_model_len=8192"])
    [then, *_] = plan_deploy(applied_book, inventory)
    [now, *_] = plan_deploy(load_playbook(PLAYBOOK), inventory)
    applied = Applied.parse(
        release.manifest(then, applied_book, RUN_A, [], GateTarget.of(applied_book))
    )
    on_target = dict(then.read_back_files)

    assert drift(then, then.release_id, applied, on_target) == Drift([], [])
    found = drift(now, then.release_id, applied, on_target)
    changed, differs = found.changed, found.playbook_differs
    assert changed == []
    assert [d.splitlines()[0] for d in differs] == [
        f"serve.sh: the playbook now differs from what run {RUN_A} applied (renders differently)"
    ]
    assert "-  --max-model-len 8192 \\" in differs[0] and "+  --max-model-len 32768" in differs[0]

    edited = json.loads(on_target[DRAFTER_CONFIG])
    edited["dflash_config"]["mask_token_id"] = 1
    on_target[DRAFTER_CONFIG] = json.dumps(edited).encode()
    changed = drift(then, then.release_id, applied, on_target).changed
    assert changed[0].startswith(f"changed on the target since run {RUN_A}: config.json: SHA-256")
    assert any("dflash_config: " in c and f"applied by run {RUN_A}" in c for c in changed), changed
    del on_target[LAUNCH_SCRIPT]
    changed = drift(then, then.release_id, applied, on_target).changed
    assert f"changed on the target since run {RUN_A}: serve.sh: missing on the target" in changed


@pytest.mark.parametrize("columns", ["200", "60"])
def test_the_releases_table_never_cuts_an_id(
    columns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    runs = fleet_runs(fleet())
    document = {
        "result": "ok",
        "playbook": "qwen-dflash",
        "runs": [
            {
                "run_id": run.run_id,
                "time": run.time,
                "user": run.user,
                "action": run.action,
                "targets": [
                    {"name": n, "result": r.result, "release": r.current, "release_state": "kept"}
                    for n, r in run.targets.items()
                ],
            }
            for run in runs
        ],
        "targets": [
            {
                "name": "ct2",
                "host": "pve",
                "current": None,
                "kept": [
                    {
                        "release": "b2222222",
                        "created": None,
                        "made_by_run": RUN_B,
                        "current": False,
                        "named_by_a_run": False,
                    }
                ],
            }
        ],
    }
    print_releases(Releases.model_validate(document))
    out = capsys.readouterr().out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= int(columns)
    words = set(out.split())  # an id cut or folded is not one word any more
    assert {RUN_A, RUN_B, RUN_C, "a1111111", "a2222222", "b1111111", "b2222222"} <= words
    header = next(line for line in out.splitlines() if line.startswith("RUN "))
    assert ("WHEN" in header) == (columns == "200")
