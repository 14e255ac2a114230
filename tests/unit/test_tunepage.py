"""`orch report` of a tune from its history row: the page draws the chart `orch tune`
printed. `tests/fixtures/tune-run.json` is the document of a real `orch tune
--num-speculative-tokens 2,4` on the stand-in lab without a baseline (its levels
have no speedup: the chart draws total tokens/s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from recorded import record_json
from tunepages import check_tune_page

from orchestrator.documents.history import History as HistoryDocument
from orchestrator.documents.report import Report
from orchestrator.documents.tune import Tune
from orchestrator.errors import InputError
from orchestrator.history import History
from orchestrator.report import page, runpage
from orchestrator.report.tables import print_history

TUNE = json.loads((Path(__file__).parents[1] / "fixtures" / "tune-run.json").read_text())
HOSTILE = '<script>alert(1)</script><img src="http://evil.example/x.png">'


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> History:
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path))
    return History()


def test_the_html_report_of_a_tune_draws_each_level_with_the_best_depth_marked(
    history: History,
) -> None:
    record_json(history, TUNE, "tune", "ops")
    shown = page.to_html(runpage.sections(Report.of(history.find(TUNE["run_id"]))))
    check_tune_page(shown, TUNE)
    assert "1 streams, total tok/s" in shown and "8 streams, total tok/s" in shown
    assert "<td>4</td><td>total_tokens_per_second</td>" in shown


def test_the_markdown_report_of_a_tune_has_the_chart_as_text(history: History) -> None:
    record_json(history, TUNE, "tune", "ops")
    text = page.markdown(runpage.sections(Report.of(history.find(TUNE["run_id"]))))
    lines_at_8 = text.split("8 streams, total tok/s:\n")[1].splitlines()[:2]
    assert lines_at_8[0].split()[0] == "k=2" and not lines_at_8[0].endswith("best")
    assert lines_at_8[1].split()[0] == "k=4" and lines_at_8[1].endswith("best")
    assert "- **apply it**: --set server.num_speculative_tokens=4" in text


def test_what_a_tune_record_carries_is_escaped_in_the_page(history: History) -> None:
    hostile = {**TUNE, "target": HOSTILE, "warnings": [HOSTILE]}
    hostile["steps"] = [{**step, "result": HOSTILE} for step in TUNE["steps"]]
    record_json(history, hostile, "tune", "ops")
    shown = page.to_html(runpage.sections(Report.of(history.find(TUNE["run_id"]))))
    assert "<script>" not in shown and "<img" not in shown
    assert "&lt;script&gt;" in shown
    Tune.model_validate(hostile)  # the record is a Tune as orch writes it


def test_the_history_lists_a_tune_on_its_container(
    history: History, capsys: pytest.CaptureFixture[str]
) -> None:
    record_json(history, TUNE, "tune", "ops")
    print_history(HistoryDocument.of(history.last(10)), [])
    (row,) = [line for line in capsys.readouterr().out.splitlines() if TUNE["run_id"] in line]
    assert row.split()[:3] == [TUNE["run_id"], "ct200", "ok"], row
    assert " tune " in row


def test_a_tune_record_that_is_not_a_tune_is_an_error_naming_the_field(history: History) -> None:
    spoilt = {**TUNE, "steps": [{**TUNE["steps"][0], "levels": "many"}]}
    record_json(history, spoilt, "tune", "ops")
    report = Report.of(history.find(TUNE["run_id"]))
    named = f"run {TUNE['run_id']}: the tune's record: steps.0.levels"
    with pytest.raises(InputError, match=named):
        runpage.sections(report)
