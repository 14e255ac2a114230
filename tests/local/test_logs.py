"""Reading a server log in bounded steps: the command on real files, the cursor on its output."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from orchestrator.container.server import LogRead, parse_log_read, read_log
from orchestrator.fleet.logs import Cursor
from orchestrator.layout import Layout


def read(link: Path, cursor: Cursor, lines: int = 3, limit: int = 1 << 16) -> list[str]:
    argv = read_log(str(link), lines, limit, cursor.identity, cursor.offset)
    done = subprocess.run(argv, capture_output=True, timeout=30, check=True)
    return cursor.take(parse_log_read(done.stdout))


def test_last_lines_then_what_is_written_then_a_new_log(tmp_path: Path) -> None:
    root = tmp_path / "it's $(x)"
    layout = Layout(str(root))
    first = Path(layout.release_log("r1"))
    first.parent.mkdir(parents=True)
    first.write_text("".join(f"line {i}\n" for i in range(10)))
    os.symlink(Layout.log_link_target("r1"), layout.server_log)
    cursor = Cursor()

    assert read(Path(layout.server_log), cursor) == ["line 7", "line 8", "line 9"]
    assert cursor.path == str(first)
    assert read(Path(layout.server_log), cursor) == []
    with first.open("a") as log:
        log.write("line 10\nhalf")
    assert read(Path(layout.server_log), cursor) == ["line 10"]
    with first.open("a") as log:
        log.write(" done\n")
    assert read(Path(layout.server_log), cursor) == ["half done"]

    second = Path(layout.release_log("r2"))
    second.parent.mkdir(parents=True)
    second.write_text("new 0\nnew 1\n")
    os.symlink(Layout.log_link_target("r2"), f"{layout.server_log}.tmp")
    os.replace(f"{layout.server_log}.tmp", layout.server_log)
    assert read(Path(layout.server_log), cursor) == [
        f"==> {second} (a new server log) <==",
        "new 0",
        "new 1",
    ]


def test_reads_are_bounded_and_resume_where_they_stopped(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    cursor = Cursor()
    assert read(log, cursor) == []
    log.write_text("x" * 100 + "\n" + "y" * 10 + "\n")
    assert read(log, cursor, limit=40) == []
    assert cursor.offset == 40
    assert read(log, cursor, limit=40) == []
    assert read(log, cursor, limit=40) == ["x" * 100, "y" * 10]
    assert cursor.offset == 112


def test_a_deployment_from_before_per_release_logs_and_one_without_a_log(tmp_path: Path) -> None:
    legacy = tmp_path / "server.log"
    legacy.write_text("old a\nold b\n")
    assert read(legacy, Cursor(), lines=1) == ["old b"]
    missing = Cursor()
    assert read(tmp_path / "nothing" / "server.log", missing) == []
    assert not missing.found


def test_a_truncated_log_is_read_again_from_its_last_lines() -> None:
    cursor = Cursor()
    cursor.take(LogRead("tail", "1:2", 20, "/l", b"a\nb\n"))
    assert cursor.take(LogRead("tail", "1:2", 4, "/l", b"c\n")) == [
        "==> /l (a new server log) <==",
        "c",
    ]
    assert cursor.offset == 4 and cursor.rest() == []
    cursor.take(LogRead("more", "1:2", 9, "/l", b"no newline"))
    assert cursor.rest() == ["no newline"]
