"""The run log: records, bounds, escapes, threads, failures, finding a run by prefix."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from masking import pieces_of

from orchestrator import secrets
from orchestrator.cli import cli
from orchestrator.connections import RecordedTransport
from orchestrator.errors import InputError, TransportError
from orchestrator.runlog import FIELD_LIMIT, RunLog, bounded, find, prune, read
from orchestrator.transport.memory import MemoryTransport, reply

RUN = "20261202T200633Z-0dff02"


def lines_of(log: RunLog) -> list[str]:
    return log.path.read_text().splitlines()


def test_a_command_is_recorded_with_the_run_id_on_every_line(tmp_path: Path) -> None:
    log = RunLog(RUN, tmp_path / "runs" / f"{RUN}.log")
    inner = MemoryTransport("ct200").on("/bin/sh", reply("one\ntwo\n", 3, b"oops\n"))
    transport = RecordedTransport(inner, "ct200", log)

    result = transport.run(["/bin/sh", "-c", "cat a\ncat b"], stdin=b"12345")

    assert (result.exit_code, result.stdout, result.stderr) == (3, b"one\ntwo\n", b"oops\n")
    lines = lines_of(log)
    assert all(line.split()[1:3] == [RUN, "ct200"] for line in lines)
    assert [line.split(" ", 3)[3] for line in lines] == [
        "run: /bin/sh -c 'cat a",
        "run: cat b'",
        lines[2].split(" ", 3)[3],
        "stdout: one",
        "stdout: two",
        "stderr: oops",
    ]
    assert lines[2].split(" ", 3)[3].startswith("exit: 3 after ")
    assert lines[2].endswith(", 5 bytes on stdin")
    assert (log.path.stat().st_mode & 0o777) == 0o600


def test_an_error_is_recorded_and_raised_unchanged(tmp_path: Path) -> None:
    log = RunLog(RUN, tmp_path / f"{RUN}.log")

    class Broken(MemoryTransport):
        def run(self, argv, stdin=None, timeout=None):  # type: ignore[no-untyped-def]
            raise TransportError("pve1", "running sh", "connection lost")

    transport = RecordedTransport(Broken("ct200"), "ct200", log)
    with pytest.raises(TransportError, match="connection lost"):
        transport.run(["true"])
    assert "error: after" in lines_of(log)[-1] and "connection lost" in lines_of(log)[-1]


def test_output_is_bounded_and_control_characters_are_escaped(tmp_path: Path) -> None:
    log = RunLog(RUN, tmp_path / f"{RUN}.log")
    huge = b"A" * 10 * FIELD_LIMIT + b"\x1b]0;pwned\x07\n"
    transport = RecordedTransport(MemoryTransport().on("x", reply(huge)), "ct200", log)
    transport.run(["x"])
    text = log.path.read_text()
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;pwned\\x07" in text
    assert f"[... {len(huge) - FIELD_LIMIT} bytes left out ...]" in text
    assert len(text) < 2 * FIELD_LIMIT
    assert bounded(b"short") == "short"


def test_parallel_records_are_never_interleaved(tmp_path: Path) -> None:
    log = RunLog(RUN, tmp_path / f"{RUN}.log")
    body = "\n".join(f"line {i}" for i in range(50))

    def write(container: str) -> None:
        for _ in range(20):
            log.write(container, [("stdout", body)])

    threads = [threading.Thread(target=write, args=(f"ct{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    containers = [line.split()[2] for line in lines_of(log)]
    assert len(containers) == 8 * 20 * 50
    blocks = [containers[i : i + 50] for i in range(0, len(containers), 50)]
    assert all(len(set(block)) == 1 for block in blocks)


def test_repeated_steps_are_written_once_and_passed_on(tmp_path: Path) -> None:
    log = RunLog(RUN, tmp_path / f"{RUN}.log")
    seen: list[tuple[str, str, str]] = []

    def forward(name: str, step: str, detail: str = "") -> None:
        seen.append((name, step, detail))

    progress = log.recording(forward)
    for step in ("wait ready (30 s left)", "wait ready (29 s left)", "gate"):
        progress("ct200", step)
    progress("ct200", "gate", "server log: INFO up")
    assert len(seen) == 4 and seen[-1] == ("ct200", "gate", "server log: INFO up")
    assert [line.split(" ", 3)[3] for line in lines_of(log)] == [
        "step: wait ready (30 s left)",
        "step: gate",
    ]


def test_a_log_that_cannot_be_written_warns_once_and_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "runs"
    blocker.write_text("a file where the directory should be")
    log = RunLog(RUN, blocker / f"{RUN}.log")
    transport = RecordedTransport(MemoryTransport().on("x", reply("ok")), "ct200", log)
    assert transport.run(["x"]).text == "ok"
    first = log.warning
    log.note("ct200", "more")
    assert first and str(blocker) in first and log.warning == first


def test_a_run_is_found_by_its_id_or_a_unique_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path))
    for run_id in ("20261202T200633Z-0dff02", "20261202T200633Z-0dff0a", "20261203T100000Z-abcdef"):
        RunLog(run_id).note("", f"run {run_id}")
    assert read("20261203").run_id == "20261203T100000Z-abcdef"
    assert read("20261203").lines[0].endswith("note: run 20261203T100000Z-abcdef")
    assert find("20261202T200633Z-0dff02").name == "20261202T200633Z-0dff02.log"
    with pytest.raises(InputError, match="ambiguous: 2 runs match"):
        find("20261202")
    with pytest.raises(InputError, match="no run log for '2025'"):
        find("2025")
    for bad in ("", "../20261202", "2026*", "a/b"):
        with pytest.raises(InputError, match="is not a run id"):
            find(bad)


def test_only_the_newest_run_logs_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path))
    ids = [f"202612{day:02d}T100000Z-abcdef" for day in (3, 1, 2, 4)]
    for run_id in ids:
        RunLog(run_id).note("", "ran")
    prune(keep=2)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "20261203T100000Z-abcdef.log",
        "20261204T100000Z-abcdef.log",
    ]
    prune(keep=5)
    assert len(list((tmp_path / "runs").iterdir())) == 2


def test_history_show_steps_prints_the_runs_steps_and_results_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path))
    log = RunLog(RUN)
    log.note("", "deploy qwen-dflash by ops: ct200 on pve1")
    log.step("ct200", "preflight")
    transport = RecordedTransport(
        MemoryTransport("ct200").on("/bin/sh", reply("x\n" * 50)), "ct200", log
    )
    transport.run(["/bin/sh", "-c", "step: not a step\nnote: nor a note"])
    log.step("ct200", "gate")
    log.note("ct200", "result deployed, gate pass")

    shown = CliRunner().invoke(cli, ["history", "--show", RUN[:12], "--steps"])

    assert shown.exit_code == 0, shown.output
    assert [line.split(" ", 3)[2:] for line in shown.output.splitlines()] == [
        ["-", "note: deploy qwen-dflash by ops: ct200 on pve1"],
        ["ct200", "step: preflight"],
        ["ct200", "step: gate"],
        ["ct200", "note: result deployed, gate pass"],
    ]
    whole = CliRunner().invoke(cli, ["history", "--show", RUN[:12]])
    assert len(whole.output.splitlines()) > 50
    alone = CliRunner().invoke(cli, ["history", "--steps"])
    assert alone.exit_code == 2 and "--steps goes with --show RUN_ID" in alone.output


def test_the_run_log_is_its_owners_only_and_holds_no_piece_of_a_key(tmp_path: Path) -> None:
    key = "sk-runlog-0123456789abcdef012345678"
    secrets.register([key])
    cut = ("x" * 1990 + key)[:2000]
    log = RunLog("run-1", tmp_path / "runs" / "run-1.log")

    log.write("ct1", [("server log", cut), ("error", f"HTTP 401: {key[:20]}")])

    assert stat.S_IMODE(log.path.stat().st_mode) == 0o600
    text = log.path.read_text()
    assert "server log" in text
    assert not pieces_of(key, text)
