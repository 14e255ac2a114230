"""`orch tune`'s pure parts: the depths asked for, the best depth per speed level, the
table and chart printed; and its body stopped before its first deploy."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from clocks import FakeClock
from fleets import EXAMPLE, FAST, PLAYBOOK, Fleet, checked, with_models, write_models
from scripted import serving

from orchestrator.cancel import Cancel
from orchestrator.documents.tune import Tune
from orchestrator.errors import InputError
from orchestrator.fleet.tune import TuneAsk, check, tune, tune_exit_code
from orchestrator.metrics.speed import Figure
from orchestrator.progress import no_progress
from orchestrator.report.tune import figure_words, print_tune, tune_rows
from orchestrator.transport.base import Result
from orchestrator.tuning import (
    TunedLevel,
    TuneStep,
    best_per_level,
    chosen_value,
    parse_values,
)


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("1..8", list(range(1, 9))),
        ("3..3", [3]),
        (" 2 .. 4 ", [2, 3, 4]),
        ("2,4", [2, 4]),
        ("8, 1,3", [8, 1, 3]),
        ("5", [5]),
    ],
)
def test_a_range_or_a_list_gives_the_depths_in_order(text: str, values: list[int]) -> None:
    assert parse_values(text) == values


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("8..1", "a range runs upward, e.g. 1..8"),
        ("1-8", "give a range A..B or a list A,B,... of whole numbers"),
        ("2,,4", "give a range A..B or a list A,B,... of whole numbers"),
        ("two", "give a range A..B or a list A,B,... of whole numbers"),
        ("2,4,2", "2 given twice"),
        ("0..3", "0 is outside 1..256"),
        ("4,300", "300 is outside 1..256"),
        ("1..40", "40 values, at most 32 (one deploy each)"),
    ],
)
def test_a_bad_list_names_the_option_and_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_values(text)
    assert str(raised.value) == f"--num-speculative-tokens {text!r}: {says}"


def level(concurrency: int, total: float, speedup: float | None = None) -> TunedLevel:
    return TunedLevel(
        concurrency,
        Figure(total, total - total / 10, total + total / 10),
        None if speedup is None else Figure(speedup, speedup - 0.1, speedup + 0.1),
    )


def step(
    value: int, *levels: TunedLevel, verdict: str = "pass", result: str = "deployed"
) -> TuneStep:
    return TuneStep(value, f"run-{value}", result, f"rel-{value}", verdict, 3.5, list(levels))


def test_the_best_depth_per_level_is_the_fastest_passing_one() -> None:
    """Fewer drafts win at 8 streams, more at 1: each level has its own best; a depth
    that failed its gate (rolled back) is never chosen however fast it measured."""
    steps = [
        step(2, level(1, 100, 1.4), level(8, 500, 1.2)),
        step(4, level(1, 150, 1.9), level(8, 450, 1.05)),
        step(6, level(1, 190, 2.4), level(8, 900, 2.0), verdict="fail", result="rolled_back"),
    ]
    best = best_per_level(steps)
    assert [(b.concurrency, b.value, b.by, b.figure.mean) for b in best] == [
        (1, 4, "speedup", 1.9),
        (8, 2, "speedup", 1.2),
    ]
    assert chosen_value(best, steps) == 2  # the production level: the highest


def test_without_a_reference_everywhere_the_total_decides_and_a_tie_takes_fewer_drafts() -> None:
    steps = [step(3, level(1, 120, 1.1)), step(2, level(1, 120)), step(5, level(1, 110))]
    assert [(b.value, b.by) for b in best_per_level(steps)] == [(2, "total_tokens_per_second")]


def test_nothing_passing_chooses_nothing() -> None:
    steps = [step(2, level(1, 100), verdict="fail", result="rolled_back")]
    assert best_per_level(steps) == []
    assert chosen_value([], steps) is None
    assert chosen_value([], [step(3)]) == 3  # passed, but its gate measured no speed


def test_the_exit_code_is_the_signals_or_whether_a_depth_passed() -> None:
    stopped = Cancel()
    stopped.request(signal.SIGINT)
    assert tune_exit_code([0], 2, stopped) == 130
    assert tune_exit_code([1, 0], 4, Cancel()) == 0
    assert tune_exit_code([1, 1], None, Cancel()) == 1
    assert tune_exit_code([0, 3], 2, Cancel()) == 3


def test_figures_print_with_their_bounds() -> None:
    assert figure_words(Figure(1.234, 1.1, 1.3), "x", 2) == "1.23x (1.10-1.30)"
    assert figure_words(Figure(50.0)) == "50"
    assert figure_words(None) == "-"


def test_the_table_has_a_row_per_depth_and_level() -> None:
    rows = tune_rows([step(2, level(1, 100, 1.5), level(8, 400)), step(4, verdict="fail")])
    assert [[str(cell) for cell in row] for row in rows] == [
        ["2", "1", "deployed", "pass", "3.50", "100.0 (90.0-110.0)", "1.50x (1.40-1.60)", "run-2"],
        ["2", "8", "deployed", "pass", "3.50", "400.0 (360.0-440.0)", "-", "run-2"],
        ["4", "", "deployed", "fail", "3.50", "-", "-", "run-4"],
    ]


def tune_document(**fields: object) -> Tune:
    steps = [
        step(2, level(1, 100, 1.5), level(8, 400, 1.1)),
        step(4, level(1, 160, 2.0), level(8, 300, 0.8)),
    ]
    best = best_per_level(steps)
    base = {
        "playbook": "qwen-dflash",
        "run_id": "run-t",
        "started": "2026-12-04T18:00:00+00:00",
        "target": "ct200",
        "values": [2, 4],
        "result": "ok",
        "steps": steps,
        "best": best,
        "chosen": 2,
        "apply_with": "--set server.num_speculative_tokens=2",
        "playbook_line": "num_speculative_tokens: 2",
        "started_on": "rel-0",
        "ended": "best",
        "current": "rel-2",
        "final_run_id": "run-9",
    }
    return Tune.model_validate({**base, **fields})


def test_the_printout_names_the_best_per_level_the_line_and_the_ending(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_tune(tune_document())
    out = capsys.readouterr().out
    assert "best at 1 streams: 4 (speedup 2.00 (1.90-2.10))" in out
    assert "best at 8 streams: 2 (speedup 1.10 (1.00-1.20))" in out
    assert "apply it: --set server.num_speculative_tokens=2" in out
    assert "num_speculative_tokens: 2" in out
    assert "ct200 ended on the best passing depth: rel-2" in out
    assert "k=2" in out and "k=4" in out and "0.80x" in out  # the chart's bars
    interrupted = tune_document(ended="interrupted", chosen=None, best=[], apply_with=None)
    print_tune(interrupted)
    out = capsys.readouterr().out
    assert "apply it" not in out
    assert "ct200 ended stopped by a signal, on the gated release serving then: rel-2" in out


def test_the_document_keeps_the_contract() -> None:
    document = checked(tune_document(), "Tune")
    assert document["field"] == "server.num_speculative_tokens"
    assert document["steps"][0]["levels"][0] == {
        "concurrency": 1,
        "total_tokens_per_second": {"mean": 100.0, "lower": 90.0, "upper": 110.0},
        "speedup": {"mean": 1.5, "lower": 1.4, "upper": 1.6},
    }
    assert document["best"][1] == {
        "concurrency": 8,
        "value": 2,
        "by": "speedup",
        "figure": {"mean": 1.1, "lower": pytest.approx(1.0), "upper": pytest.approx(1.2)},
    }


def ask(limit: str = "ct200", values: list[int] | None = None) -> TuneAsk:
    return TuneAsk(str(PLAYBOOK), EXAMPLE, limit, FAST, values or [2, 4])


def test_tune_measures_one_container() -> None:
    with pytest.raises(
        InputError, match="--limit ct\\*: tune measures one container, this selects ct129, ct200"
    ):
        check(ask("ct*"))
    assert [p.container for p in check(ask()).plans] == ["ct200"]


def test_a_tune_stopped_before_its_first_deploy_touches_nothing() -> None:
    fleet = Fleet(*FAST)
    before = {name: dict(c.files) for name, c in fleet.containers.items()}
    cancel = Cancel()
    cancel.request(signal.SIGINT)

    printed, code = tune(ask(), fleet.connect, no_progress, cancel)

    assert code == 130
    document = checked(printed, "Tune")
    assert (document["result"], document["ended"], document["steps"]) == (
        "interrupted",
        "interrupted",
        [],
    )
    assert (document["target"], document["current"], document["chosen"]) == ("ct200", None, None)
    assert {name: c.files for name, c in fleet.containers.items()} == before


def test_a_tune_again_reuses_its_depths_kept_verdict_unless_rechecked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same depth tuned again is the same launch on the same vLLM: its deploy reuses
    the verdict the first tune kept; `--recheck` has the target's vLLM asked again."""
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path / "state"))
    fleet = Fleet(*FAST)
    with_models(fleet, write_models(tmp_path))
    container = fleet.containers["ct200"]
    serving(container.transport, "qwen3.6-27b")
    container.install = b"/opt/vllm/lib/python3/site-packages/vllm-0.32.0.dist-info/RECORD\n"
    stage = {"name": "parser", "status": "ok", "detail": "", "seconds": 9.0}
    passed = json.dumps({"version": "0.32.0", "stages": [stage], "seconds": 9.0}).encode()
    checks: list[int] = []
    container.transport.on(
        "validate_launch", lambda argv, _: checks.append(1) or Result(tuple(argv), 0, passed, b"")
    )

    def tuned(recheck: bool) -> list[int]:
        """The depths the tune deployed."""
        asked = TuneAsk(str(PLAYBOOK), EXAMPLE, "ct200", FAST, [2], recheck=recheck)
        printed, _ = tune(asked, fleet.connect, no_progress, Cancel(), clock=FakeClock())
        return [step["value"] for step in checked(printed, "Tune")["steps"]]

    assert (tuned(False), len(checks)) == ([2], 1)
    assert (tuned(False), len(checks)) == ([2], 1)
    assert (tuned(True), len(checks)) == ([2], 2)
