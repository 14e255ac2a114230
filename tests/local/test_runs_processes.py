"""runs: the cases that run a real process (a shell, the CLI or a script); the
rest are unit tests in tests/unit/test_runs.py."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from auditruns import RUN_A, RUN_B, fleet_lines

from orchestrator.layout import Layout
from orchestrator.runs import (
    KeptRelease,
)
from orchestrator.transaction import releases
from orchestrator.transport.base import Result
from orchestrator.transport.memory import ANY, MemoryTransport


def test_the_release_records_are_read_from_a_real_deployment(tmp_path: Path) -> None:
    layout = Layout(str(tmp_path / "qwen-dflash"))
    ages = {"b1111111": 2_000, "a1111111": 1_000, "c3333333": 3_000}
    for name in ages:
        Path(layout.release(name)).mkdir(parents=True)
    manifest = {"run_id": RUN_A, "created": "2026-12-01T10:00:00+00:00"}
    Path(layout.release("a1111111"), "manifest.json").write_text(json.dumps(manifest))
    Path(layout.release("b1111111"), "manifest.json").write_text("{torn")
    for name, mtime in ages.items():
        os.utime(layout.release(name), (mtime, mtime))
    Path(layout.current).symlink_to("releases/b1111111")
    Path(layout.audit_log).write_text("\n".join(fleet_lines()) + "\n")

    def local(argv: Sequence[str], stdin: bytes | None) -> Result:
        done = subprocess.run(list(argv), capture_output=True, timeout=30, check=False)
        return Result(tuple(argv), done.returncode, done.stdout, done.stderr)

    record = releases.record(MemoryTransport().on(ANY, local), layout, "ct1")
    assert record.current == "b1111111"
    assert record.kept == [
        KeptRelease("a1111111", manifest["created"], RUN_A),
        KeptRelease("b1111111"),
        KeptRelease("c3333333"),
    ]
    assert [r.run_id for r in record.records] == [RUN_A, RUN_B]

    empty = releases.record(MemoryTransport().on(ANY, local), Layout(str(tmp_path / "x")), "ct2")
    assert (empty.current, empty.kept, empty.records) == (None, [], [])
