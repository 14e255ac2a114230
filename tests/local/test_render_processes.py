"""render: the cases that run a real process (a shell, the CLI or a script); the
rest are unit tests in tests/unit/test_render.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

from filetree import write

from orchestrator.render import render_template


def test_shquote_survives_a_real_shell(tmp_path: Path) -> None:
    hostile = "a b'c\"$(touch x);`touch y`\nz"
    write(tmp_path, "t.j2", "printf %s {{ value | shquote }}")
    script = render_template("t.j2", {"value": hostile}, tmp_path)
    out = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout == hostile
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
