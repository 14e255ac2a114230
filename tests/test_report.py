from __future__ import annotations

import pytest

from orchestrator import report

DOCUMENT = {
    "playbook": "qwen-dflash",
    "run_id": "r1",
    "started": "2026-12-02T10:00:00+00:00",
    "method": "dflash",
    "drafter": "z-lab/Qwen3.6-27B-DFlash",
    "model": "qwen3.6-27b",
    "result": "not applied",
    "targets": [
        {
            "name": "ct200",
            "host": "pve1",
            "result": "rolled_back",
            "release": "new",
            "previous_release": "old",
            "gate": {
                "verdict": "fail",
                "mean_acceptance_length": 1.1078,
                "per_position_acceptance": [0.08, 0.03],
                "drafts": 812,
                "reason": "mean acceptance length 1.11 < required 2.50",
                "explanation": "check dflash_config.target_layer_ids",
            },
            "rollback_gate": None,
            "findings": [],
            "error": "gate fail: mean acceptance length 1.11 < required 2.50",
        }
    ],
    "warnings": ["could not record the run"],
}


@pytest.fixture(autouse=True)
def plain_wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "160")


def test_acceptance_bars_scale_to_the_width() -> None:
    assert report.acceptance_bars([1.0, 0.5, 0.0], width=4) == (
        "  pos  1 ████ 1.000\n  pos  2 ██░░ 0.500\n  pos  3 ░░░░ 0.000"
    )


def test_run_report_shows_outcome_gate_reason_and_warnings(capsys: pytest.CaptureFixture) -> None:
    report.print_run(DOCUMENT)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "ct200" in line and "rolled_back" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == [
        "ct200",
        "rolled_back",
        "new",
        "old",
        "fail",
        "1.11",
        "812",
    ]
    assert "ct200 gate: mean acceptance length 1.11 < required 2.50" in out
    assert "  why: check dflash_config.target_layer_ids" in out
    assert "pos  1 ███░" in out
    assert "warning: could not record the run" in out


def test_history_lists_one_row_per_target_with_its_method(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "260")
    report.print_history([{**DOCUMENT, "user": "alice", "command": "deploy"}])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "alice" in line)
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells[1:] == [
        "alice",
        "deploy",
        "qwen-dflash",
        "qwen3.6-27b",
        "dflash",
        "z-lab/Qwen3.6-27B-DFlash",
        "r1",
        "ct200",
        "rolled_back",
        "1.11",
        "0.08",
        "new",
        "old",
    ]


def test_rows_take_their_columns_from_every_row(capsys: pytest.CaptureFixture) -> None:
    report.print_rows(
        [{"container": "a", "error": "unreachable"}, {"container": "b", "release": "x"}]
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if "│" in line or "┃" in line]
    header = [cell.strip() for cell in lines[0].strip("┃ ").split("┃")]
    assert header == ["container", "error", "release"]
    second = [cell.strip() for cell in lines[2].strip("│ ").split("│")]
    assert second == ["b", "", "x"]
