"""The sh toolkit: quoting, atomic writes, frames and links, run for real under /bin/sh."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shelltools import (
    HOSTILE_NAMES,
    captured,
    frame,
    run,
    tree,
)

from orchestrator.container.server import (
    parse_server_state,
)
from orchestrator.container.shell import (
    parse_frames,
    parse_listing,
    point_link,
    read_files,
    read_link,
    write_file,
)
from orchestrator.container.status import parse_status_report
from orchestrator.errors import NeedsAttention


def test_write_file_quotes_every_hostile_part_of_the_path() -> None:
    argv = write_file("/srv/my models/it's $(x);`y`.json", "0600")

    assert argv == [
        "/bin/sh",
        "-c",
        "set -e; umask 022; mkdir -p '/srv/my models'; "
        """tmp=$(mktemp '/srv/my models/.it'"'"'s $(x);`y`.json.XXXXXX'); """
        """trap 'rm -f "$tmp"' EXIT; cat > "$tmp"; sync "$tmp"; chmod 0600 "$tmp"; """
        """mv -f "$tmp" '/srv/my models/it'"'"'s $(x);`y`.json'; trap - EXIT; """
        "sync '/srv/my models'",
    ]


def test_write_file_replaces_by_rename_with_mode_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "release" / "serve.sh"
    target.parent.mkdir()
    target.write_bytes(b"old\n")
    with target.open("rb") as old:
        done = run(write_file(str(target), "0755"), stdin=b"new\x00\n\xff")

        assert done.returncode == 0, done.stderr
        assert old.read() == b"old\n"  # the old inode is intact: replaced, not overwritten
    assert target.read_bytes() == b"new\x00\n\xff"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert tree(tmp_path) == {"release", "release/serve.sh"}


def test_write_file_creates_missing_directories_with_the_default_mode(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "config.json"

    done = run(write_file(str(target)), stdin=b"{}")

    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"{}"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert tree(tmp_path) == {"a", "a/b", "a/b/config.json"}


def test_a_failed_write_removes_its_temp_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "config.json"
    target.write_bytes(b"old")

    done = run(write_file(str(target), "not-a-mode"), stdin=b"new")

    assert done.returncode != 0
    assert target.read_bytes() == b"old"
    assert tree(tmp_path) == {"config.json"}


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_path_creates_exactly_that_file(tmp_path: Path, name: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    target = tmp_path / "my models $(touch pwned)" / name

    done = run(write_file(str(target)), stdin=b"data", cwd=cwd)

    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"data"
    assert tree(tmp_path) == {"cwd", target.parent.name, f"{target.parent.name}/{name}"}


@settings(max_examples=25, deadline=None)
@given(contents=st.lists(st.binary(max_size=300), min_size=1, max_size=len(HOSTILE_NAMES)))
def test_read_files_frames_round_trip_any_bytes_and_skip_missing_files(
    tmp_path_factory: pytest.TempPathFactory, contents: list[bytes]
) -> None:
    directory = tmp_path_factory.mktemp("files")
    written = {}
    for name, data in zip(HOSTILE_NAMES, contents, strict=False):
        (directory / name).write_bytes(data)
        written[str(directory / name)] = data
    missing = [str(directory / "missing"), str(directory / "no such dir" / "x")]

    done = run(read_files([missing[0], *written, missing[1]]), cwd=directory)

    assert done.returncode == 0, done.stderr
    assert parse_frames(done.stdout) == written
    assert tree(directory) == {Path(p).name for p in written}


def test_read_files_of_nothing_prints_nothing() -> None:
    done = run(read_files([]))
    assert (done.returncode, done.stdout) == (0, b"")


def test_point_link_switches_atomically(tmp_path: Path) -> None:
    for release in ("a1", "b2"):
        (tmp_path / "releases" / release).mkdir(parents=True)
    link = tmp_path / "current"
    assert run(point_link(str(link), "releases/a1")).returncode == 0
    seen: set[str] = set()
    gaps: list[OSError] = []
    switching = True

    def watch() -> None:
        while switching:
            try:
                seen.add(os.readlink(link))
            except OSError as exc:
                gaps.append(exc)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for release in ["b2", "a1"] * 10:
            assert run(point_link(str(link), f"releases/{release}")).returncode == 0
    finally:
        switching = False
        watcher.join()

    assert gaps == []
    assert seen == {"releases/a1", "releases/b2"}
    assert tree(tmp_path) == {"releases", "releases/a1", "releases/b2", "current"}
    assert run(read_link(str(link))).stdout == b"releases/a1\n"
    assert run(read_link(str(tmp_path / "nope"))).stdout == b""


def test_listing_keeps_names_with_spaces_and_skips_blank_lines() -> None:
    text = "2 config.json\n17179869184 model-00001.safetensors\n\n3 notes with spaces.txt\n"
    assert parse_listing(text) == {
        "config.json": 2,
        "model-00001.safetensors": 17179869184,
        "notes with spaces.txt": 3,
    }


def test_frames_hold_any_bytes_one_after_another() -> None:
    data = (
        frame("/d/a b/config.json", b'{"a": 1}\n')
        + frame("empty", b"")
        + frame("bin 42", b"\n12 x\n\x00\xff")
    )
    assert parse_frames(data) == {
        "/d/a b/config.json": b'{"a": 1}\n',
        "empty": b"",
        "bin 42": b"\n12 x\n\x00\xff",
    }
    assert parse_frames(b"") == {}


@given(st.dictionaries(st.text(st.characters(codec="utf-8", exclude_characters="\n")), st.binary()))
def test_frames_round_trip(files: dict[str, bytes]) -> None:
    assert parse_frames(b"".join(frame(name, data) for name, data in files.items())) == files


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        pytest.param(
            parse_server_state,
            "stopped \n",
            id="server-state-without-pid",
        ),
        pytest.param(
            parse_server_state,
            "running 31337x\n",
            id="server-state-bad-pid",
        ),
        pytest.param(
            parse_status_report,
            captured("status-report.txt").replace('"verdict": "pass"}', '"verd'),
            id="status-report-truncated-audit",
        ),
        pytest.param(
            parse_listing,
            "2 config.json\nx2 model.safetensors\n",
            id="listing-bad-size",
        ),
    ],
)
def test_malformed_text_needs_attention(parse: object, text: str) -> None:
    with pytest.raises(NeedsAttention):
        parse(text)  # type: ignore[operator]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            frame("config.json", b"{}")[:-1],
            id="cut-off-frame",
        ),
        pytest.param(
            b"config.json\n{}",
            id="no-length",
        ),
        pytest.param(
            frame("config.json", b"{}") + b"garbage without a newline",
            id="trailing-garbage",
        ),
    ],
)
def test_malformed_frames_need_attention(data: bytes) -> None:
    with pytest.raises(NeedsAttention):
        parse_frames(data)
