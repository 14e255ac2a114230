"""`orch report`'s pages from a recorded run, without a lab: escaping, the chart, lookup."""

from __future__ import annotations

import html
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from recorded import record_json

from orchestrator import runlog
from orchestrator.contract import jsonable
from orchestrator.documents.report import Report
from orchestrator.errors import InputError
from orchestrator.history import History
from orchestrator.report import page, runpage


def reported(run_id: str) -> Report:
    """The report of the run `run_id` names in the local history."""
    return Report.of(History().find(run_id))


HOSTILE = '<script>alert(1)</script><img src="http://evil.example/x.png">'


def run(run_id: str = "20261203T120000Z-abcdef") -> dict:
    gate = {
        "verdict": "fail",
        "reason": "mean acceptance length 1.12 (95% upper bound 1.20) < required 2.50",
        "mean_acceptance_length": 1.12,
        "lower": 1.05,
        "upper": 1.2,
        "per_position_acceptance": [0.08, 0.03, 0.0],
        "drafts": 900,
        "explanation": "check dflash_config.target_layer_ids",
        "criteria": {
            "min_mean_acceptance_length": 2.5,
            "min_position1_acceptance": 0.5,
            "min_drafts": 200,
            "confidence": 0.95,
        },
        "by_context": [
            {"context": "short", "endpoint": "/v1/completions", "verdict": "fail",
             "mean_acceptance_length": 1.12, "lower": 1.05, "upper": 1.2, "drafts": 900,
             "seconds": 3.2},
        ],
    }  # fmt: skip
    return {
        "kind": "DeployRun",
        "api_version": "orch/v1",
        "playbook": "qwen-dflash",
        "run_id": run_id,
        "started": "2026-12-03T12:00:00+00:00",
        "method": "dflash",
        "drafter": "z-lab/Qwen3.6-27B-DFlash",
        "model": "qwen3.6-27b",
        "inventory": "/srv/inv.yaml",
        "assignments": ["gate.time_budget=60"],
        "result": "not_applied",
        "targets": [
            {
                "name": "ct200",
                "host": "pve1",
                "result": "rolled_back",
                "release": "bbbbbbbbbbbb",
                "previous_release": "aaaaaaaaaaaa",
                "current": "aaaaaaaaaaaa",
                "gate": gate,
                "rollback_gate": {**gate, "verdict": "pass", "explanation": None},
                "findings": [
                    {
                        "severity": "error",
                        "field": "x",
                        "expected": 1,
                        "actual": 2,
                        "message": HOSTILE,
                    }
                ],
                "error": f"gate failed: {HOSTILE}",
                "steps": {"preflight": 0.4, "gate": 3.2},
                "notes": [],
                "changes": f"--- a\n+++ b\n-{HOSTILE}\n+```\n",
            }
        ],
    }


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.urls += [v or "" for k, v in attrs if k in ("src", "href")]


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> History:
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path))
    store = History()
    record_json(store, run(), "deploy", "ops")
    return store


def test_html_escapes_what_came_from_files_and_fetches_nothing(history: History) -> None:
    page_text = page.to_html(runpage.sections(reported("20261203T120000Z-ab")))
    parsed = Page()
    parsed.feed(page_text)
    assert "script" not in parsed.tags and "img" not in parsed.tags
    assert parsed.urls == []
    assert "&lt;script&gt;" in page_text
    assert parsed.tags.count("rect") == 6  # the failed gate's curve and the rollback's
    assert "mean acceptance length &gt;= 2.5, position-1 acceptance &gt;= 0.5" in page_text


def test_markdown_has_a_bar_chart_and_a_fence_longer_than_any_in_the_diff(
    history: History,
) -> None:
    text = page.markdown(runpage.sections(reported("20261203T120000Z-abcdef")))
    assert "  1 " + "#" * 2 + " " * 28 + " 0.08" in text  # 0.08 of 30 columns
    assert "````diff" in text
    assert "- **who**: ops" in text
    assert "| ct200 | pve1 | rolled_back | aaaaaaaaaaaa | bbbbbbbbbbbb |" in text


def test_unknown_and_ambiguous_run_ids(history: History) -> None:
    record_json(history, run("20261203T120000Z-abffff"), "deploy", "ops")
    with pytest.raises(InputError, match="ambiguous"):
        history.find("20261203T120000Z-ab")
    with pytest.raises(InputError, match="not in the local history"):
        history.find("1999")


def test_markdown_shows_markup_from_files_as_text(history: History) -> None:
    text = page.markdown(runpage.sections(reported("20261203T120000Z-abcdef")))
    outside_fences = text.split("````diff")[0]
    assert "<" not in outside_fences and "&lt;script>alert(1)&lt;/script>" in outside_fences


LOG_LINE = "ERROR ![x](http://198.51.100.1/x.png) [y](https://198.51.100.1/) \x1b[31mred\x1b[0m"
"""A server log line with an image, a link and a terminal escape."""


def hostile_log_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[page.Section]:
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path))
    document = run()
    target = document["targets"][0]
    target["error"] = f"server did not become ready: {LOG_LINE}"
    target["gate"]["explanation"] = LOG_LINE
    target["notes"] = [LOG_LINE]
    record_json(History(), document, "deploy", "ops")
    return runpage.sections(reported(document["run_id"]))


def test_a_log_line_in_the_markdown_report_renders_as_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = page.markdown(hostile_log_run(tmp_path, monkeypatch))
    rendered = MarkdownIt("commonmark").render(text)
    parsed = Page()
    parsed.feed(rendered)
    assert "img" not in parsed.tags and "a" not in parsed.tags and parsed.urls == []
    assert "\x1b" not in text
    assert "![x](http://198.51.100.1/x.png)" in html.unescape(rendered)  # shown as it was
    assert "\\x1b[31mred" in html.unescape(rendered)


def test_a_log_line_in_the_html_report_is_text_without_terminal_escapes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = page.to_html(hostile_log_run(tmp_path, monkeypatch))
    parsed = Page()
    parsed.feed(text)
    assert "img" not in parsed.tags and "a" not in parsed.tags and parsed.urls == []
    assert "\x1b" not in text
    assert "\\x1b[31mred" in text


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("![img](http://198.51.100.1/x.png)", "\\!\\[img\\](http\\://198.51.100.1/x.png)"),
        ("<http://x.example>", "&lt;http\\://x.example>"),
        ("see www.example.com", "see www\\.example.com"),
        ("*b* _em_ `c` ~d~ a|b rolled_back", "\\*b\\* \\_em\\_ \\`c\\` \\~d\\~ a\\|b rolled_back"),
        ("ops@host 12:00:00", "ops\\@host 12:00:00"),
        ("\x1b[31m", "\\\\x1b\\[31m"),
        ("1.12 (95%)", "1.12 (95%)"),
    ],
)
def test_markdown_text_escapes_what_could_be_markup(value: str, shown: str) -> None:
    assert page.markdown_text(value) == shown


def test_the_report_document_is_the_recorded_run_and_each_containers_timed_steps(
    history: History,
) -> None:
    log = runlog.RunLog("20261203T120000Z-abcdef")
    log.step("ct200", "preflight")
    log.command("ct200", ["true"], None, 0.01, (0, b"", b""))
    log.step("ct200", "write release")
    log.step("ct129", "preflight")

    report = reported("20261203T120000Z-abc")

    assert report.run.run_id == "20261203T120000Z-abcdef"
    assert report.log == str(log.path)
    assert [(s.name, s.step) for s in report.steps] == [
        ("ct200", "preflight"),
        ("ct200", "write release"),
        ("ct129", "preflight"),
    ]
    assert [s.step for s in report.timeline("ct129")] == ["preflight"]
    printed = jsonable(report)
    assert list(printed)[:3] == ["kind", "api_version", "result"]
    assert (printed["kind"], printed["result"]) == ("Report", "ok")


def test_a_report_whose_log_was_pruned_has_no_steps(history: History) -> None:
    report = reported("20261203T120000Z-abcdef")
    assert (report.log, report.steps) == (None, [])
    assert "| ct200 | pve1 | rolled_back |" in page.markdown(runpage.sections(report))
