"""`orch report` of a rolled-back run on the lab, and `orch history`'s filters on it."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from labtools import FAST, LabHandle

pytestmark = pytest.mark.lab

GUESSED_IDS = "drafter.overrides.dflash_config.target_layer_ids=[1,17,33,49,63]"


class Page(HTMLParser):
    """What a browser would load and show: the URLs it would fetch, the text, the SVGs."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.text: list[str] = []
        self.rects = 0
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.rects += tag == "rect"
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href", "action")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_report_of_a_rolled_back_run(lab: LabHandle, tmp_path: Path) -> None:
    inventory = str(lab.inventory)
    good = lab.orch("deploy", "qwen-dflash", "-i", inventory, "--limit", "ct200", *FAST)
    assert good.code == 0, good.stderr[-2000:]
    bad = lab.orch(
        "deploy", "qwen-dflash", "-i", inventory, "--limit", "ct200", "--force",
        "--set", GUESSED_IDS, "--json", *FAST,
    )  # fmt: skip
    assert bad.code == 1, bad.stderr[-2000:]
    run_id = bad.json["run_id"]
    assert bad.json["inventory"] == str(lab.inventory.resolve())

    page_file = tmp_path / "run.html"
    made = lab.orch("report", run_id[:18], "--format", "html", "-o", str(page_file))
    assert made.code == 0, str(made)
    page = Page()
    page.feed(page_file.read_text())
    shown = " ".join(page.text)
    assert page.urls == [] and "http" not in page_file.read_text()
    assert "rolled_back" in shown and "fail" in shown
    assert "mean acceptance length >= 2.5" in shown  # the threshold
    assert "target_layer_ids" in shown  # the likely cause, in the field's terms
    assert f"--- ct200:{lab.deployment_dir('ct200')}/releases/" in shown  # what changed
    assert "ct200: rollback to" in shown
    assert "svg" in page.tags and page.rects >= 15  # the curve: one bar per position
    assert "wait ready" in shown  # the steps, with their times from the run log

    markdown = lab.orch("report", run_id)
    assert markdown.code == 0, str(markdown)
    assert "# deploy qwen-dflash: not_applied" in markdown.stdout
    assert "| short |" in markdown.stdout or "| short" in markdown.stdout
    assert "  1 ## " in markdown.stdout or "  1 #" in markdown.stdout  # the text bar chart

    assert lab.orch("report", "nosuchrun").code == 2

    every = lab.orch("history", "--json", "--playbook", "qwen-dflash", "--since", "1h")
    assert [r["run_id"] for r in every.json["runs"]][:2] == [run_id, good_run(lab, run_id)]
    other = tmp_path / "other.yaml"
    other.write_text(lab.inventory.read_text())
    assert lab.orch("history", "--json", "--inventory", str(other)).json["runs"] == []
    on_lab = lab.orch("history", "--json", "--inventory", inventory).json["runs"]
    assert len(on_lab) == 2
    assert lab.orch("history", "--json", "--playbook", "qwen-mtp").json["runs"] == []
    assert lab.orch("history", "--json", "--since", "2099-01-01").json["runs"] == []
    refused = lab.orch("history", "--since", "last tuesday")
    assert refused.code == 2 and "--since 'last tuesday'" in refused.stderr

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed: no screenshot of the page")
    blank = tmp_path / "blank.html"
    blank.write_text("<!doctype html><title>blank</title>")
    shot, empty = screenshot(chromium, page_file, tmp_path), screenshot(chromium, blank, tmp_path)
    # The same window drawn blank compresses to a few kilobytes; the run page (tables, the
    # acceptance chart, the steps) to many times that: a page that failed to draw does not.
    assert shot.stat().st_size > 5 * empty.stat().st_size, (shot.stat(), empty.stat())


def screenshot(chromium: str, page: Path, directory: Path) -> Path:
    """The page as headless Chromium draws it in a 1200x2000 window, as a PNG file."""
    shot = directory / f"{page.stem}.png"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri()],
        check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    return shot


def good_run(lab: LabHandle, bad_run: str) -> str:
    runs = lab.orch("history", "--json").json["runs"]
    return next(r["run_id"] for r in runs if r["run_id"] != bad_run)
