from __future__ import annotations

import sqlite3
import stat
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner
from masking import pieces_of
from recorded import record_json
from rundocs import deploy_run

from orchestrator import secrets
from orchestrator.cli import cli
from orchestrator.contract import jsonable
from orchestrator.documents.history import History as HistoryDocument
from orchestrator.documents.runs import InterruptedRun, InterruptedTarget
from orchestrator.errors import InputError, NeedsAttention
from orchestrator.history import SCHEMA, History, check_writable, new_run_id
from orchestrator.probes import load_prompts
from orchestrator.settings import state_dir
from orchestrator.transaction.outcome import Outcome


def document(run_id: str, started: str, result: str) -> dict:
    return {
        "playbook": "qwen-dflash",
        "run_id": run_id,
        "started": started,
        "result": result,
        "targets": [{"name": "ct200", "result": "deployed"}],
    }


def interrupted(run_id: str, started: str) -> InterruptedRun:
    target = InterruptedTarget(name="ct200", step="switch", release="r-new", current="r-old")
    return InterruptedRun(
        playbook="qwen-dflash", run_id=run_id, started=started, recovered_by="r9", targets=[target]
    )


def test_history_returns_newest_runs_first_with_who_ran_them(tmp_path: Path) -> None:
    history = History(tmp_path / "h.sqlite")
    history.record(interrupted("r1", "2026-12-01T10:00:00+00:00"), "deploy", "alice")
    record_json(
        history, document("r2", "2026-12-02T10:00:00+00:00", "not applied"), "rollback", "bob"
    )
    runs = history.last(5)
    assert [(r.run_id, r.user, r.command, r.result) for r in runs] == [
        ("r2", "bob", "rollback", "not applied"),
        ("r1", "alice", "deploy", "interrupted"),
    ]
    (older,) = history.last(1)
    assert jsonable(older.targets) == [{"name": "ct200", "result": "deployed"}]  # as recorded
    printed = jsonable(HistoryDocument.of(runs))["runs"]
    assert printed[0]["result"] == "not_applied"  # today's words
    assert list(printed[1]) == [
        "playbook", "run_id", "started", "result", "recovered_by", "targets", "user", "command"
    ]  # fmt: skip


def test_history_of_one_container_lists_the_runs_that_had_it_among_their_targets(
    tmp_path: Path,
) -> None:
    history = History(tmp_path / "h.sqlite")
    other = {**document("r2", "2026-12-02T10:00:00+00:00", "ok"), "targets": [
        {"name": "ct129", "result": "deployed"}, {"name": "ct200x", "result": "deployed"}
    ]}  # fmt: skip
    record_json(history, document("r1", "2026-12-01T10:00:00+00:00", "ok"), "deploy", "alice")
    record_json(history, other, "deploy", "bob")
    assert [r.run_id for r in history.last(5, container="ct200")] == ["r1"]
    assert [r.run_id for r in history.last(5, container="ct129")] == ["r2"]
    assert history.last(5, container="nosuch") == []


def test_empty_history_has_no_file_and_no_runs(tmp_path: Path) -> None:
    assert History(tmp_path / "none.sqlite").last(3) == []
    assert not (tmp_path / "none.sqlite").exists()


def test_state_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path / "explicit"))
    assert state_dir() == tmp_path / "explicit"
    monkeypatch.delenv("ORCH_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "orch"


def test_run_ids_are_unique_and_sortable_by_time() -> None:
    ids = {new_run_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(len(i.split("-")[0]) == len("20261202T120000Z") for i in ids)


def test_builtin_prompts_load() -> None:
    prompts = load_prompts("builtin")
    assert len(prompts) >= 10 and all(isinstance(p, str) and p for p in prompts)


def test_user_prompt_file_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "one"}\n\n{"text": "two"}\n')
    with pytest.raises(InputError, match=rf"^{path}:3: expected a JSON object with \"prompt\""):
        load_prompts(str(path))
    path.write_text('{"prompt": "one"}\n{"prompt": "two"}\n')
    assert load_prompts(str(path)) == ["one", "two"]
    with pytest.raises(InputError, match="cannot read"):
        load_prompts(str(tmp_path / "missing.jsonl"))


def test_an_unwritable_history_is_a_project_error(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state dir should be")
    with pytest.raises(NeedsAttention, match="could not record the run"):
        History(blocker / "history.sqlite").record(interrupted("r1", "x"), "deploy", "a")


def test_a_history_that_is_not_a_database_is_an_error_naming_it(tmp_path: Path) -> None:
    store = tmp_path / "history.sqlite"
    store.write_bytes(b"not a database, as a full disk or a stray copy leaves it" * 100)

    with pytest.raises(NeedsAttention, match=f"cannot read the history {store}"):
        History(store).last(5)


def test_a_state_dir_that_cannot_be_written_stops_the_run_before_the_fleet(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("where the state dir should be")

    with pytest.raises(NeedsAttention, match=r"cannot be written .* nothing was changed"):
        check_writable(blocker / "orch")
    check_writable(tmp_path / "orch")  # a fresh one is made and probed
    assert list((tmp_path / "orch").iterdir()) == []


def test_the_history_is_its_owners_only_and_its_rows_hold_no_piece_of_a_key(
    tmp_path: Path,
) -> None:
    key = "sk-history-0123456789abcdef01234567"
    secrets.register([key])
    cut = ("x" * 1985 + key)[:2000]  # a server log line cut on the container mid-key
    history = History(tmp_path / "state" / "history.sqlite")
    run = deploy_run([Outcome("ct1", "pve1", "rolled_back", error=f"log: {cut}")])

    history.record(run, "deploy", "ops")

    assert stat.S_IMODE(history.path.stat().st_mode) == 0o600
    with closing(sqlite3.connect(history.path)) as db:
        [(row,)] = db.execute("SELECT document FROM runs").fetchall()
    assert "rolled_back" in row
    assert not pieces_of(key, row)


def test_an_existing_history_open_to_others_is_closed_to_them(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    path.touch(mode=0o644)
    path.chmod(0o644)
    History(path).record(deploy_run([Outcome("ct1", "pve1", "deployed")]), "deploy", "ops")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def garbage(store: Path) -> None:
    store.write_bytes(b"not a database, as a full disk or a stray copy leaves it" * 100)


def directory(store: Path) -> None:
    store.mkdir()


def doctored_row(store: Path) -> None:
    with closing(sqlite3.connect(store)) as db, db:
        db.execute(SCHEMA)
        db.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
            ("20261203T120000Z-abcdef", "2026-12-03", "ops", "deploy", "p", "ok", "{not json"),
        )


def doctored_table(store: Path) -> None:
    with closing(sqlite3.connect(store)) as db, db:
        db.execute("CREATE TABLE runs (run_id TEXT)")
        db.execute("INSERT INTO runs VALUES ('20261203T120000Z-abcdef')")


@pytest.mark.parametrize("spoil", [garbage, directory, doctored_row, doctored_table])
@pytest.mark.parametrize("command", [["report", "20261203T120000Z"], ["history"]])
def test_report_and_history_on_a_spoilt_history_name_it_and_exit_3(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spoil: Callable[[Path], None],
    command: list[str],
) -> None:
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path))
    store = tmp_path / "history.sqlite"
    spoil(store)

    result = CliRunner().invoke(cli, command)

    assert result.exit_code == 3, result.output
    assert f"cannot read the history {store}" in result.output
    assert ("Traceback" not in result.output and result.exception is None) or isinstance(
        result.exception, SystemExit
    )
