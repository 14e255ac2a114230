"""The sh toolkit: quoting, atomic writes, frames and links, run for real under /bin/sh."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shelltools import (
    HOSTILE_NAMES,
    captured,
    frame,
    proc_state,
    run,
    running,
    tree,
    wait_until,
)

from orchestrator.container.journal import read_journals
from orchestrator.container.server import (
    parse_server_state,
)
from orchestrator.container.shell import (
    bounded,
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
    argv = write_file("/srv/my models/it's $(x);`y`.json", b"hello", "0600")

    digest = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    assert argv == [
        "/bin/sh",
        "-c",
        "set -e; umask 022; mkdir -p '/srv/my models'; "
        """tmp=$(mktemp '/srv/my models/.it'"'"'s $(x);`y`.json.XXXXXX'); """
        """trap 'rm -f "$tmp"' EXIT; trap 'exit 1' HUP INT PIPE TERM; """
        """cat > "$tmp"; n=$(wc -c < "$tmp"); h=$(sha256sum < "$tmp"); """
        f"""if [ "$n" -ne 5 ] || [ "${{h%% *}}" != {digest} ]; then """
        """echo "incomplete write: $n of 5 bytes arrived, SHA-256 ${h%% *} """
        f"""(expected {digest}); the old file is kept" >&2; exit 1; fi; """
        """sync "$tmp"; chmod 0600 "$tmp"; """
        """mv -f "$tmp" '/srv/my models/it'"'"'s $(x);`y`.json'; trap - EXIT; """
        "sync '/srv/my models'",
    ]


@pytest.mark.parametrize(
    "arrived",
    [b"", b'{"run_id": "r1", "st', b'{"run_id": "r2", "step": "gate"}\n', b"x" * 40],
    ids=["nothing", "cut short", "other bytes of the same length", "too long"],
)
def test_a_write_that_is_not_all_of_its_data_keeps_the_old_file(
    tmp_path: Path, arrived: bytes
) -> None:
    """What a stdin cut by a killed orch or a dropped connection delivers: `cat` ends
    with exit 0 all the same; the length and SHA-256 check is what refuses it."""
    target = tmp_path / "journal.json"
    target.write_bytes(b"old journal")
    data = b'{"run_id": "r1", "step": "gate"}\n'

    done = run(write_file(str(target), data), stdin=arrived)

    assert done.returncode == 1
    assert f"{len(arrived)} of {len(data)} bytes arrived".encode() in done.stderr
    assert target.read_bytes() == b"old journal"
    assert tree(tmp_path) == {"journal.json"}


def test_a_write_cut_by_a_killed_writer_keeps_the_old_file(tmp_path: Path) -> None:
    """A real writer killed half way through its stdin (SIGKILL, as orch's death)."""
    target = tmp_path / "journal.json"
    target.write_bytes(b"old journal")
    data = b"x" * 100_000
    writer = subprocess.Popen(
        ["/bin/sh", "-c", 'head -c 20000 "$1"; kill -9 $$', "sh", "/dev/zero"],
        stdout=subprocess.PIPE,
    )
    done = subprocess.run(
        write_file(str(target), data),
        stdin=writer.stdout,
        capture_output=True,
        timeout=30,
        check=False,
    )
    writer.wait(timeout=30)

    assert done.returncode == 1, done.stderr
    assert b"20000 of 100000 bytes arrived" in done.stderr
    assert target.read_bytes() == b"old journal"
    assert tree(tmp_path) == {"journal.json"}


def test_write_file_replaces_by_rename_with_mode_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "release" / "serve.sh"
    target.parent.mkdir()
    target.write_bytes(b"old\n")
    with target.open("rb") as old:
        done = run(write_file(str(target), b"new\x00\n\xff", "0755"), stdin=b"new\x00\n\xff")

        assert done.returncode == 0, done.stderr
        assert old.read() == b"old\n"  # the old inode is intact: replaced, not overwritten
    assert target.read_bytes() == b"new\x00\n\xff"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert tree(tmp_path) == {"release", "release/serve.sh"}


def test_write_file_creates_missing_directories_with_the_default_mode(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "config.json"

    done = run(write_file(str(target), b"{}"), stdin=b"{}")

    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"{}"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert tree(tmp_path) == {"a", "a/b", "a/b/config.json"}


def test_a_failed_write_removes_its_temp_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "config.json"
    target.write_bytes(b"old")

    done = run(write_file(str(target), b"new", "not-a-mode"), stdin=b"new")

    assert done.returncode != 0
    assert target.read_bytes() == b"old"
    assert tree(tmp_path) == {"config.json"}


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_path_creates_exactly_that_file(tmp_path: Path, name: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    target = tmp_path / "my models $(touch pwned)" / name

    done = run(write_file(str(target), b"data"), stdin=b"data", cwd=cwd)

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


def test_read_journals_frames_each_deployments_journal_and_nothing_deeper(
    tmp_path: Path,
) -> None:
    """What a run of a replaced playbook reads to find a --replace that stopped it."""
    state = tmp_path / "state dir"
    for name, data in {"qwen-mtp": b'{"a": 1}', "it's": b""}.items():
        (state / name).mkdir(parents=True)
        (state / name / "journal.json").write_bytes(data)
    (state / "no-journal").mkdir()
    (state / "qwen-mtp" / "releases" / "x").mkdir(parents=True)
    (state / "qwen-mtp" / "releases" / "x" / "journal.json").write_bytes(b"deeper")

    done = run(read_journals(str(state)))

    assert done.returncode == 0, done.stderr
    assert parse_frames(done.stdout) == {
        f"{state}/qwen-mtp/journal.json": b'{"a": 1}',
        f"{state}/it's/journal.json": b"",
    }
    assert run(read_journals(str(tmp_path / "none"))).stdout == b""


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


def test_a_hung_command_and_everything_it_started_end_at_the_bound(tmp_path: Path) -> None:
    """A `vllm --version` that hangs with a child holding a port, as seen in the field:
    under `bounded` nothing of it is left once the bound has passed."""
    vllm = tmp_path / "vllm"
    pids = tmp_path / "pids"
    vllm.write_text(
        "#!/bin/sh\n"
        f'python3 -c \'import socket,time; s=socket.socket(); s.bind(("127.0.0.1", 0)); '
        f"s.listen(); time.sleep(300)' &\n"
        f"echo $$ $! > {pids}\n"
        "sleep 300\n"
    )
    vllm.chmod(0o755)

    started = time.monotonic()
    done = run(bounded([str(vllm), "--version"], 1))
    took = time.monotonic() - started

    assert done.returncode == 124  # timeout's own status: the command was ended
    assert took < 10
    started_pids = [int(p) for p in pids.read_text().split()]
    wait_until(lambda: not any(running(p) for p in started_pids))
    left = [p for p in started_pids if proc_state(p) not in (None, "Z", "X")]
    assert left == []


def test_a_torn_audit_line_is_left_out_of_the_status_row() -> None:
    """An append cut short (the last audit line torn) leaves the runs before it readable."""
    whole = captured("status-report.txt")
    torn = whole + 'audit {"action": "deploy", "run_id": "20250101T1300'
    assert parse_status_report(torn) == parse_status_report(whole)
