"""What a tune's HTML report must show, read back from the page as a browser would: the
chart's groups (one per speed level), a bar per depth with its figure, the best passing
depth marked at each level, the `--set` line; nothing fetched, nothing run."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any


class SvgText(HTMLParser):
    """Each <svg> <text>'s content in order, the tags seen and every URL attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.urls: list[str] = []
        self.texts: list[str] = []
        self.body: list[str] = []
        self._in_text = False
        self._in_svg = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href")]
        self._in_svg = self._in_svg or tag == "svg"
        if self._in_svg and tag == "text":
            self._in_text = True
            self.texts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_text = self._in_text and tag != "text"
        self._in_svg = self._in_svg and tag != "svg"

    def handle_data(self, data: str) -> None:
        if self._in_text:
            self.texts[-1] += data
        self.body.append(data)


def chart_groups(texts: list[str]) -> dict[str, list[tuple[str, str]]]:
    """The chart's groups by title, each its bars' (label, words) in order: a group's
    title, then a label and its words per bar."""
    groups: dict[str, list[tuple[str, str]]] = {}
    rest = iter(texts)
    title = ""
    for item in rest:
        if " streams, " in item:
            title = item
            groups[title] = []
        else:
            groups[title].append((item, next(rest)))
    return groups


def check_tune_page(page: str, document: dict[str, Any]) -> None:
    """The page of `document` (an `orch tune --json` Tune) shows its chart and lines."""
    parsed = SvgText()
    parsed.feed(page)
    assert "script" not in parsed.tags and "img" not in parsed.tags and parsed.urls == []
    assert "svg" in parsed.tags and "rect" in parsed.tags
    groups = chart_groups(parsed.texts)
    steps = document["steps"]
    levels = sorted({lv["concurrency"] for s in steps for lv in s["levels"]})
    assert len(groups) == len(levels) and levels
    best = {b["concurrency"]: b for b in document["best"]}
    for concurrency in levels:
        at = [(s, lv) for s in steps for lv in s["levels"] if lv["concurrency"] == concurrency]
        by_speedup = all(lv["speedup"] for _, lv in at)
        title = f"{concurrency} streams, {'speedup' if by_speedup else 'total tok/s'}"
        bars = groups[title]
        assert [label for label, _ in bars] == [f"k={s['value']}" for s, _ in at]
        for (step, level), (_, words) in zip(at, bars, strict=True):
            figure = level["speedup"] if by_speedup else level["total_tokens_per_second"]
            mean = f"{figure['mean']:.2f}x" if by_speedup else f"{figure['mean']:.1f}"
            assert words.startswith(mean), (words, figure)
            marked = words.endswith("best")
            assert marked == (concurrency in best and best[concurrency]["value"] == step["value"])
    body = " ".join(parsed.body)
    if document["apply_with"]:
        assert document["apply_with"] in body
    assert document["run_id"] in body
