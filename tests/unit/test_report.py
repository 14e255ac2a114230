from __future__ import annotations

import dataclasses
import io
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console
from rundocs import deploy_run

from orchestrator import durations
from orchestrator.connections import ConnectionUsage
from orchestrator.contract import jsonable
from orchestrator.documents.fleet import ForeignLock, LockOwner, Status, StatusTarget, Verify
from orchestrator.documents.history import History, RecordedRun
from orchestrator.documents.local import Findings
from orchestrator.documents.runs import DeployRun
from orchestrator.drafters.findings import Finding, Severity
from orchestrator.gate import GateReport, PhaseReport
from orchestrator.metrics.advice import Advice
from orchestrator.metrics.assess import Verdict, VerdictOutcome
from orchestrator.probes.context import ContextBucket
from orchestrator.probes.endpoints import Endpoint
from orchestrator.report import live, screen, tables
from orchestrator.report import run as run_report
from orchestrator.rollout import RolloutPlan, RolloutRun, Wave
from orchestrator.transaction.outcome import Outcome

REASON = "mean acceptance length 1.11 < required 2.50"


def verdict(
    outcome: VerdictOutcome = "fail", mean: float = 1.1078, drafts: int = 812, reason: str = REASON
) -> Verdict:
    return Verdict(outcome, mean, None, None, (0.08, 0.03), drafts, reason)


def phase(
    outcome: VerdictOutcome, mean: float, drafts: int, reason: str, upper: int | None
) -> PhaseReport:
    """The long context on the chat endpoint, without thinking."""
    bucket = ContextBucket("long", 2048, upper, ())
    endpoint = Endpoint("chat", {"enable_thinking": False})
    return PhaseReport(bucket, endpoint, verdict(outcome, mean, drafts, reason))


GATE = GateReport(verdict(), explanation="check dflash_config.target_layer_ids")


def outcome(name: str = "ct200", **fields: Any) -> Outcome:
    """ct200 rolled back from `new` to `old`: its gate failed."""
    return Outcome(
        **{
            "name": name,
            "host": "pve1",
            "result": "rolled_back",
            "release": "new",
            "previous_release": "old",
            "current": "old",
            "gate": GATE,
            "error": f"gate fail: {REASON}",
            **fields,
        }
    )


def run(*targets: Outcome, **fields: Any) -> DeployRun:
    """A deploy whose one container's gate failed: rolled back."""
    fields = {"result": "not_applied", "warnings": ["could not record the run"], **fields}
    return deploy_run(list(targets) or [outcome()], **fields)


def history(**fields: Any) -> History:
    """Alice's deploy of ct200 and ct201 (both rolled back), as the history gives it back."""
    recorded = {**jsonable(run(outcome(), outcome("ct201"))), "user": "alice", "command": "deploy"}
    return History(runs=[RecordedRun.model_validate({**recorded, **fields})])


@pytest.fixture(autouse=True)
def plain_wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "160")


def test_acceptance_bars_scale_to_the_width() -> None:
    assert run_report.acceptance_bars([1.0, 0.5, 0.0], width=4) == (
        "  pos  1 ████ 1.000\n  pos  2 ██░░ 0.500\n  pos  3 ░░░░ 0.000"
    )


def cells(out: str, first: str) -> list[str]:
    """The cells of the table row that starts with `first` (columns: 2+ spaces apart)."""
    row = next(line for line in out.splitlines() if line.startswith(first))
    return re.split(r"\s{2,}", row.strip())


def test_run_report_shows_outcome_gate_reason_and_warnings(capsys: pytest.CaptureFixture) -> None:
    run_report.print_run(run())
    out = capsys.readouterr().out
    assert out.startswith("qwen-dflash run r1: not applied\n")
    # RELEASE is where ct200 stands after the rollback; the release it tried has its column
    assert cells(out, "ct200") == [
        "ct200", "rolled back", "old", "new", "old", "fail", "1.11", "812"
    ]  # fmt: skip
    assert re.search(r"CONTAINER +RESULT +RELEASE +ATTEMPTED +PREVIOUS", out)
    assert "ct200 gate: mean acceptance length 1.11 < required 2.50" in out
    assert "  why: check dflash_config.target_layer_ids" in out
    assert "pos  1 ███░" in out
    assert "warning: could not record the run" in out
    assert out.count("ct200: gate fail") == 1


def test_history_lists_one_row_per_target_with_its_method(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "260")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # a terminal: a run's fields on its first row
    tables.print_history(history(), [])
    out = capsys.readouterr().out
    # as in the run's own table: RELEASE where it ended (back on old), ATTEMPTED new
    assert out.index("RELEASE") < out.index("ATTEMPTED") < out.index("MEAN LENGTH")
    assert cells(out, "r1") == [
        "r1", "ct200", "rolled back", "old", "new", "1.11", "0.08", "old",
        "2026-12-02T10:00:00+00:00", "deploy", "qwen-dflash", "alice", "qwen3.6-27b", "dflash",
        "z-lab/Qwen3.6-27B-DFlash",
    ]  # fmt: skip
    assert cells(out, " " * 5 + "ct201") == [
        "ct201", "rolled back", "old", "new", "1.11", "0.08", "old"
    ]  # fmt: skip


def test_history_of_a_record_without_current_shows_the_release_it_recorded(
    capsys: pytest.CaptureFixture,
) -> None:
    """Records from before runs kept `current`: their release, no ATTEMPTED column."""
    recorded = jsonable(history().runs[0])
    for target in recorded["targets"]:
        del target["current"]
    tables.print_history(History(runs=[RecordedRun.model_validate(recorded)]), [])
    out = capsys.readouterr().out
    assert "ATTEMPTED" not in out
    assert cells(out, "r1")[:4] == ["r1", "ct200", "rolled back", "new"]


COLUMNS = [
    screen.Column("ID", identifier=True),
    screen.Column("STATE"),
    screen.Column("NOTE", drop=2),
    screen.Column("WHERE", drop=1),
]
ROWS = [["release-0123456789abcdef", "serving", "a fairly long note", "pve1"]]


def printed(renderable: object, width: int) -> str:
    out = Console(width=width, file=io.StringIO(), markup=False)
    out.print(renderable, crop=False)
    return out.file.getvalue()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("width", "shown", "left_out"),
    [
        (80, ["ID", "STATE", "NOTE", "WHERE"], None),
        (50, ["ID", "STATE", "WHERE"], "NOTE"),
        (36, ["ID", "STATE"], "NOTE, WHERE"),
    ],
)
def test_narrow_tables_leave_columns_out_but_never_cut_an_identifier(
    width: int, shown: list[str], left_out: str | None
) -> None:
    out = printed(screen.fitted_table(Console(width=width), COLUMNS, ROWS), width)
    assert out.splitlines()[0].split() == shown
    assert "release-0123456789abcdef" in out
    assert all(len(line) <= width for line in out.splitlines())
    note = f"(narrow terminal: {left_out} not shown)"
    assert (note in " ".join(out.split())) == (left_out is not None)


def test_too_narrow_for_the_identifiers_side_by_side_gives_one_record_per_row() -> None:
    out = printed(screen.fitted_table(Console(width=20), COLUMNS, ROWS), 20)
    assert "ID     release-0123456789abcdef" in out
    assert "NOTE   a fairly long\nnote" in out  # free text folds


def test_empty_columns_are_left_out_without_a_note() -> None:
    rows = [["r1", "serving", "", ""]]
    out = printed(screen.fitted_table(Console(width=80), COLUMNS, rows), 80)
    assert out.splitlines()[0].split() == ["ID", "STATE"]
    assert "narrow" not in out


def status_target(**fields: Any) -> StatusTarget:
    """A container's status row with nothing deployed, but for `fields`."""
    nothing = {"release": None, "server": "none", "pid": None, "release_gate": None,
               "last_run": None, "lock": None, "deploying": None, "interrupted": None,
               "health": None, "state": "nothing_deployed"}  # fmt: skip
    return StatusTarget.model_validate({"name": "ct200", "host": "pve1", **nothing, **fields})


def test_lock_holders_and_server_state_in_words() -> None:
    since = datetime(2026, 12, 2, 10, 0, tzinfo=UTC).isoformat()
    lock = LockOwner(run_id="r", user="root", control_host="ops1", pid=7, since=since)
    assert tables.locked_by(lock).startswith("root@ops1 ")
    assert durations.ago(since, now=datetime(2026, 12, 2, 10, 3, 5, tzinfo=UTC).timestamp()) == (
        "3m ago"
    )
    assert tables.locked_by(ForeignLock(text="not json")) == "not json"
    assert tables.locked_by(None) == ""
    assert tables.server_words(status_target(server="running", pid=12)) == "running pid 12"
    assert tables.server_words(status_target(server="none", pid=None)) == "not started"
    assert screen.mean_length(4.23456789) == "4.23"


HOSTILE = "alice [/] [bold red]x[/bold red] [link=http://e]y"


def test_remote_text_with_markup_is_printed_verbatim(capsys: pytest.CaptureFixture) -> None:
    target = outcome(error=f"lock held by {HOSTILE}")
    run_report.print_run(run(target, warnings=[HOSTILE]))
    out = capsys.readouterr().out
    assert f"ct200: lock held by {HOSTILE}" in out
    assert f"warning: {HOSTILE}" in out


def test_status_with_markup_and_terminal_escapes_is_shown_as_text(
    capsys: pytest.CaptureFixture,
) -> None:
    target = status_target(
        release="12abebba241d",
        state="stopped",
        lock={"text": HOSTILE},
        error="a\x1b[2Jb\x9bc\x07",
    )
    tables.print_status(Status(playbook="p", result="ok", state="stopped", targets=[target]))
    out = capsys.readouterr().out
    assert HOSTILE in out
    assert "ct200: error: a\\x1b[2Jb\\x9bc\\x07" in out
    assert "\x1b" not in out and "\x9b" not in out


def test_printable_keeps_newlines_and_tabs() -> None:
    assert screen.printable("a\tb\nc\rd\x00") == "a\tb\nc\\x0dd\\x00"


def test_wave_lines_summarise_each_wave() -> None:
    waves = [
        Wave(1, "canary", ["a"], {"deployed": 1}, 3.44, 5.0),
        Wave(2, "wave", ["b", "c"], {"rolled_back": 1, "deployed": 1}, 7.0, 0.0),
    ]
    rollout = RolloutRun(RolloutPlan(1, 2, 0, 5.0), [], waves)
    assert run_report.wave_lines(rollout) == [
        "canary 1 of 2: 1 container(s), deployed 1, 3.4 s, then paused 5 s",
        "wave 2 of 2: 2 container(s), deployed 1, rolled_back 1, 7.0 s",
    ]
    assert run_report.wave_lines(None) == []


def test_queue_lines_name_only_hosts_where_commands_waited() -> None:
    connections = [
        ConnectionUsage("pve1", "10.0.0.1", 1, 10, 10, 33, 2),
        ConnectionUsage("pve2", "10.0.0.2", 1, 10, 4, 0, 0),
    ]
    assert run_report.queue_lines(connections) == [
        "pve1: 33 command(s) queued for a session on its one SSH connection "
        "(max_sessions 10, peak 10, 2 open(s) refused by sshd and tried again)"
    ]


def test_run_report_shows_each_phase_and_the_advice(capsys: pytest.CaptureFixture) -> None:
    long = phase("fail", 1.904, 4122, "", None)
    advice = Advice(15, 10, 0.9, 0.02, "positions 11-15 accept under 2% of drafts")
    gate = dataclasses.replace(GATE, phases=[long], advice=advice)
    run_report.print_run(run(outcome(gate=gate)))
    out = capsys.readouterr().out
    assert cells(out, "long") == [
        "long", "2048..", "/v1/chat/completions", '{"enable_thinking": false}', "fail", "1.90",
        "4122",
    ]  # fmt: skip
    assert "  advice: positions 11-15 accept under 2% of drafts" in out


def test_a_wait_is_one_step_however_often_it_is_polled(capsys: pytest.CaptureFixture) -> None:
    view = live.StepView(["ct200"])
    view("ct200", "wait ready")
    began = view.steps["ct200"].since
    view("ct200", "wait ready (up to 600 s)", "server log: INFO loading")
    view("ct200", "wait ready (up to 600 s)", "server log: INFO loaded")
    assert view.steps["ct200"].since == began  # the clock counts the whole wait
    assert view.steps["ct200"].detail == "server log: INFO loaded"
    view("ct200", "gate")
    assert (view.steps["ct200"].step, view.steps["ct200"].detail) == ("gate", "")
    printed = capsys.readouterr()
    assert printed.out == ""  # progress is never on stdout
    steps = [line.split(": ", 1)[1] for line in printed.err.splitlines()]
    assert steps == ["wait ready", "gate"]  # a poll is no new line; a heartbeat needs 5 s


def test_a_piped_report_keeps_every_line_whole_and_the_phases_a_table_at_80_columns(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a terminal nothing wraps a line (a run id in the last line stays whole); the
    phase table drops a column rather than turning into records."""
    monkeypatch.setenv("COLUMNS", "80")
    run_id = "20261202T213333Z-ac274d"
    reason = "every phase passed: " + "; ".join(["short context ok"] * 8)
    said = "mean acceptance length 4.18 (95% lower bound 3.69) >= required 2.50 over 4691 drafts"
    long = phase("pass", 4.18, 4691, said, 32768)
    gate = GateReport(verdict("pass", reason=reason), phases=[long])
    log = f"/home/operator/.local/state/orch/runs/{run_id}.log"
    run_report.print_run(run(outcome(gate=gate), run_id=run_id, log=log))
    lines = capsys.readouterr().out.splitlines()
    assert "ct200 gate: pass" in lines and reason not in "\n".join(lines)
    assert f"ct200   long context via /v1/chat/completions: {said}" in lines  # one line a phase
    assert f"run log: {log} (orch history --show {run_id})" in lines
    assert cells("\n".join(lines), "long")[:3] == ["long", "2048..32768", "/v1/chat/completions"]


def test_a_pipe_gets_whole_lines_and_every_row_names_its_run(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a terminal without COLUMNS nothing is fitted to 80 columns: every column is
    there, no row is a `FIELD value` record, and `orch history | grep ct201` keeps the
    run id on the matching line."""
    monkeypatch.delenv("COLUMNS")
    tables.print_history(history(run_id="20261202T213333Z-ac274d"), [])
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "ct201" in line]
    assert line.split()[:2] == ["20261202T213333Z-ac274d", "ct201"]
    assert line.endswith("z-lab/Qwen3.6-27B-DFlash") and len(line) > 80  # no padding after
    assert "narrow terminal" not in out and "\nRUN " not in out


def test_a_piped_status_keeps_its_last_run_column(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS")
    target = status_target(
        state="serving",
        release="12abebba241d",
        server="running",
        pid=26173,
        health=200,
        release_gate={"result": "pass", "mean_acceptance_length": 4.2},
        last_run={
            "action": "deploy",
            "result": "rolled_back",
            "release": "536fae0d5d06",
            "time": "2026-12-02T10:00:00+00:00",
        },
    )
    tables.print_status(Status(playbook="p", result="ok", state="serving", targets=[target]))
    out = capsys.readouterr().out
    assert cells(out, "ct200")[:8] == [
        "ct200", "serving", "12abebba241d", "running pid 26173", "ok", "pass", "4.20",
        cells(out, "ct200")[7],
    ]  # fmt: skip
    assert cells(out, "ct200")[7].startswith("deploy rolled back 536fae0d5d06 ")
    assert cells(out, "ct200")[-1] == "pve1" and "narrow" not in out


FINDING = Finding(
    severity=Severity.ERROR,
    field="drafter.overrides.dflash_config.target_layer_ids",
    expected="[1, 16, 31, 46, 61]",
    actual="[1, 17, 33, 49, 63]",
    message="the drafter reads the hidden states of these target layers; a wrong guess "
    "collapses acceptance to about 1.1 tokens per draft",
)


@pytest.mark.parametrize("width", [60, 80, 100])
def test_findings_on_a_terminal_never_split_a_field_path_or_a_number(width: int) -> None:
    out = printed(screen.findings_table(Console(width=width), [FINDING]), width)
    assert FINDING.field in out  # whole, on one line: it is pasted into --set
    words = out.split()
    for value in ("16,", "31,", "46,", "61]", "17,", "33,", "49,", "63]", "collapses"):
        assert value in words  # wrapped at spaces, never inside a number or a word
    assert all(len(line.rstrip()) <= width for line in out.splitlines())


def test_piped_findings_are_one_line_each(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS")
    tables.print_findings(Findings.of([FINDING], None))
    lines = capsys.readouterr().out.splitlines()
    (row,) = [line for line in lines if FINDING.field in line]
    assert row.split(None, 1)[0] == "error" and row.rstrip().endswith("tokens per draft")


def test_verify_says_what_drifted_in_words(capsys: pytest.CaptureFixture) -> None:
    applied = {"run_id": "20261203T151150Z-037112", "files": {}, "playbook_path": None,
               "playbook_sha256": None, "assignments": [], "secrets": {}}  # fmt: skip
    drifted = {
        "name": "ct200",
        "host": "pve1",
        "release": "12abebba241d",
        "applied": applied,
        "changed_on_target": ["changed on the target since run 20261203T151150Z-037112: x"],
        "playbook_differs": [],
        "findings": [jsonable(FINDING)],
        "result": "drift",
    }
    clean = {**drifted, "name": "ct201", "release": "426ecd26673b", "changed_on_target": [],
             "findings": [], "result": "ok"}  # fmt: skip
    tables.print_verify(
        Verify.model_validate(
            {"playbook": "p", "result": "not_applied", "targets": [drifted, clean]}
        )
    )
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == (
        "ct200: drift: its release was changed on the container since run "
        "20261203T151150Z-037112 applied it; its files fail 1 drafter check(s)"
    )
    tables.print_verify(
        Verify.model_validate({"playbook": "p", "result": "ok", "targets": [clean]})
    )
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "no drift: each container holds what its run applied"
    assert "problems found" not in out


def test_the_gates_figures_come_as_a_heartbeat_in_a_pipe(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a terminal a gate is not silent: each heartbeat has every phase's figures so far,
    on one line (HEARTBEAT_SECONDS apart; zero here)."""
    monkeypatch.setattr(live, "HEARTBEAT_SECONDS", 0.0)
    view = live.StepView(["ct200"])
    view("ct200", "gate")
    figures = (
        "short completions: 412 drafts, mean 4.18, lower bound 3.52, required 2.50 passed\n"
        "long completions: 120 drafts, mean 4.02, required 2.50"
    )
    view("ct200", "gate", figures)
    *_, heartbeat = capsys.readouterr().err.splitlines()
    assert heartbeat.endswith(
        "ct200: gate, 0 s so far; short completions: 412 drafts, mean 4.18, lower bound 3.52, "
        "required 2.50 passed; long completions: 120 drafts, mean 4.02, required 2.50"
    )


@pytest.mark.parametrize(
    ("source", "note", "said"),
    [
        ("per_request", None, "  figures from per-request figures (metrics.speculative_decoding)"),
        (
            "counters",
            "the server's responses carry no per-request figures",
            "  figures from /metrics counter deltas (the server's responses carry no "
            "per-request figures)",
        ),
    ],
)
def test_a_gate_says_where_its_figures_came_from(
    capsys: pytest.CaptureFixture, source: str, note: str | None, said: str
) -> None:
    gate = dataclasses.replace(GATE, source=source, note=note)
    run_report.print_run(run(outcome(gate=gate)))
    assert said in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize(
    ("filters", "said"),
    [
        ([], "no runs recorded yet"),
        (["--playbook nope", "--since 2h"], "no recorded run matches --playbook nope --since 2h"),
    ],
)
def test_a_history_with_no_run_says_whether_its_filters_matched_nothing(
    capsys: pytest.CaptureFixture, filters: list[str], said: str
) -> None:
    tables.print_history(History(runs=[]), filters)
    assert capsys.readouterr().out == said + "\n"
