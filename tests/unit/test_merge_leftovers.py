"""No file of the project keeps a merge's conflict markers: a marker line in a doc or a
template is read by users (and by the floors test) as if it were meant."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLACES = ("orchestrator", "tests", "docs", "playbooks", "templates", "inventories", "benchmarks")
TEXT = {".py", ".md", ".yaml", ".yml", ".j2", ".json", ".toml", ".sh", ".txt", ".html", ".csv"}
MARKER = re.compile(r"^(<{7}|>{7}) ", re.MULTILINE)


def test_no_file_keeps_conflict_markers() -> None:
    files = [ROOT / "README.md"] + [
        path
        for place in PLACES
        for path in (ROOT / place).rglob("*")
        if path.suffix in TEXT and path.is_file()
    ]
    marked = [
        str(path.relative_to(ROOT))
        for path in files
        if MARKER.search(path.read_bytes().decode("utf-8", "replace"))
    ]
    assert len(files) > 100
    assert marked == []
