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


HOSTILE = "alice [/] [bold red]x[/bold red] [link=http://e]y"


def test_remote_text_with_markup_is_printed_verbatim(capsys: pytest.CaptureFixture) -> None:
    target = {**DOCUMENT["targets"][0], "error": f"lock held by {HOSTILE}"}  # type: ignore[dict-item]
    report.print_run({**DOCUMENT, "targets": [target], "warnings": [HOSTILE]})
    out = capsys.readouterr().out
    assert f"ct200: lock held by {HOSTILE}" in out
    assert f"warning: {HOSTILE}" in out


def test_rows_with_markup_and_terminal_escapes_are_shown_as_text(
    capsys: pytest.CaptureFixture,
) -> None:
    report.print_rows([{"container": "ct200", "lock": HOSTILE, "log": "a\x1b[2Jb\x9bc\x07"}])
    out = capsys.readouterr().out
    assert HOSTILE in out
    assert "a\\x1b[2Jb\\x9bc\\x07" in out
    assert "\x1b" not in out and "\x9b" not in out


def test_printable_keeps_newlines_and_tabs() -> None:
    assert report.printable("a\tb\nc\rd\x00") == "a\tb\nc\\x0dd\\x00"


def test_wave_lines_summarise_each_wave() -> None:
    rollout = {
        "waves": [
            {
                "wave": 1,
                "kind": "canary",
                "targets": ["a"],
                "results": {"deployed": 1},
                "seconds": 3.44,
                "paused": 5.0,
            },
            {
                "wave": 2,
                "kind": "wave",
                "targets": ["b", "c"],
                "results": {"rolled_back": 1, "deployed": 1},
                "seconds": 7.0,
                "paused": 0.0,
            },
        ]
    }
    assert report.wave_lines(rollout) == [
        "canary 1 of 2: 1 container(s), deployed 1, 3.4 s, then paused 5 s",
        "wave 2 of 2: 2 container(s), deployed 1, rolled_back 1, 7.0 s",
    ]
    assert report.wave_lines(None) == []


def test_queue_lines_name_only_hosts_where_commands_waited() -> None:
    connections = [
        {"endpoint": "pve1", "max_sessions": 10, "peak_sessions": 10, "waited": 33, "refused": 2},
        {"endpoint": "pve2", "max_sessions": 10, "peak_sessions": 4, "waited": 0, "refused": 0},
    ]
    assert report.queue_lines(connections) == [
        "pve1: 33 command(s) queued for a session on its one SSH connection "
        "(max_sessions 10, peak 10, 2 open(s) refused by sshd and tried again)"
    ]


def test_run_report_shows_each_phase_and_the_advice(capsys: pytest.CaptureFixture) -> None:
    phase = {
        "context": "long",
        "min_tokens": 2048,
        "max_tokens": None,
        "endpoint": "/v1/chat/completions",
        "chat_template_kwargs": {"enable_thinking": False},
        "verdict": "fail",
        "mean_acceptance_length": 1.904,
        "drafts": 4122,
    }
    gate = {
        **DOCUMENT["targets"][0]["gate"],  # type: ignore[index]
        "by_context": [phase],
        "advice": {"text": "positions 11-15 accept under 2% of drafts"},
    }
    document = {**DOCUMENT, "targets": [{**DOCUMENT["targets"][0], "gate": gate}]}  # type: ignore[index]
    report.print_run(document)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("long"))
    assert row.split() == [
        "long", "2048..", "/v1/chat/completions", '{"enable_thinking":', "false}", "fail", "1.90",
        "4122",
    ]  # fmt: skip
    assert "  advice: positions 11-15 accept under 2% of drafts" in out
