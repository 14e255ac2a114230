"""The watch's window and judgement, without a server."""

from __future__ import annotations

import pytest

from orchestrator.documents.watch import Watch
from orchestrator.durations import seconds, since
from orchestrator.errors import InputError
from orchestrator.fleet.watch import Sample, Window, judge, lines
from orchestrator.metrics.evaluate import Measurement
from orchestrator.metrics.scrape import SpecDecodeCounters
from orchestrator.playbook import Gate


def counters(drafts: int, per_pos: tuple[int, ...]) -> SpecDecodeCounters:
    return SpecDecodeCounters(drafts, drafts * len(per_pos), sum(per_pos), per_pos)


def test_window_spans_its_seconds_and_restarts_on_a_counter_reset() -> None:
    window = Window(10)
    for at, drafts in [(0, 100), (5, 200), (10, 300), (15, 400)]:
        window.add(Sample(at, counters(drafts, (drafts // 2, drafts // 4))))
    measured, span = window.measurement()  # type: ignore[misc]
    assert span == 10  # from t=5 (the window's start) to t=15
    assert measured.drafts == 200
    assert measured.per_position_acceptance == (0.5, 0.25)
    window.add(Sample(20, counters(10, (5, 0))))  # the server restarted
    assert window.restarts == 1
    assert window.measurement() is None
    window.add(Sample(25, counters(110, (15, 0))))
    measured, span = window.measurement()  # type: ignore[misc]
    assert (measured.drafts, span) == (100, 5)


def test_judge_needs_min_drafts_then_names_each_missed_threshold() -> None:
    gate = Gate(min_mean_acceptance_length=2.5, min_position1_acceptance=0.5, min_drafts=100)
    few = Measurement((10, 10, 10), 60)
    assert judge(few, gate).state == "too_few_drafts"
    good = Measurement((20, 20, 160), 400)  # mean 1 + (20 + 320) / 200 = 2.7, position-1 0.9
    assert judge(good, gate).state == "ok"
    bad = Measurement((150, 30, 20), 400)  # mean 1.35, position-1 0.25
    verdict = judge(bad, gate)
    assert verdict.state == "below"
    assert "mean acceptance length 1.35 < 2.50" in verdict.reason
    assert "position-1 acceptance 0.25 < 0.50" in verdict.reason


def test_lines_mark_a_container_below_with_its_figures() -> None:
    doc = {
        "playbook": "qwen-dflash",
        "result": "not_applied",
        "time": "2026-12-03T12:01:05+00:00",
        "window_seconds": 60.0,
        "thresholds": {
            "min_mean_acceptance_length": 2.5,
            "min_position1_acceptance": 0.5,
            "min_drafts": 100,
        },
        "targets": [
            {
                "name": "ct200",
                "host": "pve1",
                "acceptance": "below",
                "below_since": "2026-12-03T12:00:05+00:00",
                "mean_acceptance_length": 1.35,
                "position1_acceptance": 0.25,
                "per_position_acceptance": [0.25, 0.1],
                "drafts": 200,
                "drafts_per_second": 40.0,
                "window_seconds": 60,
                "counter_resets": 0,
                "reason": "mean acceptance length 1.35 < 2.50 over 200 drafts",
            }
        ],
    }
    assert lines(Watch.model_validate(doc)) == [
        "ct200  BELOW since 12:00:05  mean length 1.35 (min 2.50)  position-1 0.25 (min 0.50)"
        "  40.0 drafts/s over 60 s  mean acceptance length 1.35 < 2.50 over 200 drafts"
    ]


@pytest.mark.parametrize(("text", "expected"), [("90", 90), ("1m30s", 90), ("2h", 7200)])
def test_seconds(text: str, expected: float) -> None:
    assert seconds(text, "--window") == expected


@pytest.mark.parametrize("text", ["", "5 minutes", "0", "-3"])
def test_seconds_refuses(text: str) -> None:
    with pytest.raises(InputError, match="--window"):
        seconds(text, "--window")


def test_since_takes_a_span_ago_or_a_date() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    assert since("2h", "--since", now) == datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
    assert since("2026-12-01", "--since") == datetime(2026, 12, 1, tzinfo=UTC)
    with pytest.raises(InputError, match="--since 'yesterday'"):
        since("yesterday", "--since")


def test_watch_refuses_a_bad_window_before_connecting(tmp_path: object) -> None:
    from click.testing import CliRunner

    from orchestrator.cli import cli

    done = CliRunner().invoke(
        cli, ["watch", "qwen-dflash", "-i", "nowhere.yaml", "--window", "soon"]
    )
    assert done.exit_code == 2
    assert "--window 'soon': expected seconds or a span" in done.output
