"""Files written under a test's directory."""

from __future__ import annotations

from pathlib import Path


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
