"""The fault matrix's tools: `orch` as a watched process, the playbook and settings its
cases deploy with, the stand-in servers found in the real process table."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from labtools import LabHandle
from orchrun import ROOT

NAME = "ct201"
FAST = [
    "--set",
    "gate.probe.scrape_interval=0.5",
    "--set",
    "gate.ready_timeout=60",
    "--set",
    "gate.speed.max_regression=1",  # faults, not speed: see labtools.FAST
]


def lab_faults(knobs: dict) -> list[str]:
    """The stand-in's fault knobs for this release, as a YAML string holding JSON."""
    return ["--set", f"server.env.ORCH_LAB_FAULTS={json.dumps(json.dumps(knobs))}"]


SLOW_LOAD = lab_faults({"load_seconds": 6})
# Gate settings are not part of a release's fingerprint: another max_model_len makes it new.
NEW_RELEASE = ["--set", "server.max_model_len=16384"]
SLOW_GATE = [*NEW_RELEASE, "--set", "gate.min_drafts=100000", "--set", "gate.time_budget=60"]


class Orch:
    """`orch deploy --json` (or the command `argv`) as a real process: its progress lines
    (stderr) watched as they come, its output (stdout) read at the end."""

    def __init__(self, lab: LabHandle, *args: str, argv: list[str] | None = None) -> None:
        self.lines: list[str] = []
        self.stdout: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *(argv or deploy_args(lab, "--json", *args))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=lab.env,
            cwd=ROOT,
        )
        self.readers = [
            threading.Thread(target=self._read, args=(pipe, into), daemon=True)
            for pipe, into in (
                (self.process.stderr, self.lines),
                (self.process.stdout, self.stdout),
            )
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(pipe: IO[str] | None, into: list[str]) -> None:
        assert pipe
        for line in pipe:
            into.append(line)

    def wait_for_step(self, step: str, timeout: float = 180) -> None:
        self.wait_for_line(lambda line: line.rstrip().endswith(f"{NAME}: {step}"), step, timeout)

    def wait_for_line(
        self, matches: Callable[[str], bool], what: str, timeout: float = 180
    ) -> None:
        deadline = time.monotonic() + timeout
        while not any(matches(line) for line in self.lines):
            assert self.process.poll() is None, self.output
            assert time.monotonic() < deadline, f"never saw {what!r}:\n{self.output}"
            time.sleep(0.05)

    def signal(self, number: int) -> None:
        self.signalled = time.monotonic()
        self.process.send_signal(number)

    def finish(self, timeout: float = 180) -> int:
        code = self.process.wait(timeout=timeout)
        self.seconds_after_signal = time.monotonic() - getattr(self, "signalled", 0.0)
        for reader in self.readers:
            reader.join(timeout=10)
        return code

    @property
    def document(self) -> dict:
        return json.loads("".join(self.stdout))

    @property
    def output(self) -> str:
        return "".join(self.lines + self.stdout)


def deployment(lab: LabHandle) -> Path:
    return lab.deployment_dir(NAME)


def server_processes(lab: LabHandle) -> list[int]:
    """Every live stand-in server of the container, from the real process table (not
    the stand-in's own records): an orphan shows here whoever started it."""
    rootfs = str(deployment(lab).parents[3])
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv]
        if (
            state != "Z"
            and "orchestrator.lab.vllm_standin" in words
            and any(w.startswith(rootfs) for w in words)
        ):
            found.append(int(entry.name))
    return found


def deploy_args(lab: LabHandle, *args: str) -> list[str]:
    return ["deploy", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, *FAST, *args]
