"""The fault matrix's tools: `orch` as a watched process (its lines timed, its stop
latency measured), the lab's hold on a container command, the playbook and settings its
cases deploy with, the stand-in servers found in the real process table."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from labtools import LabHandle
from orchrun import ROOT
from releasetree import lab_release

from orchestrator.deadline import MIN_CALL_SECONDS
from orchestrator.lab import hold
from orchestrator.lab.paths import ContainerPaths, server_records

NAME = "ct201"
RecordProperty = Callable[[str, object], None]
"""pytest's `record_property`: a case's figures into the matrix's JUnit XML."""
SCRAPE_INTERVAL = 0.5
"""The matrix's gate scrape interval: how long the gate's loop sleeps between looks."""
FAST = [
    "--set",
    f"gate.probe.scrape_interval={SCRAPE_INTERVAL}",
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

STOP_SECONDS = SCRAPE_INTERVAL + MIN_CALL_SECONDS
"""From a stop signal to the first step of the way back (or to the exit of a run that
changed nothing): a poll interval (every wait of orch's sleeps on the stop event, the
gate's loop looks again after `SCRAPE_INTERVAL`), plus the work of the one safe step
orch finishes first, which is one remote command on a busy host: `MIN_CALL_SECONDS`,
the time orch's deadlines give the last look at a busy host (deadline.py)."""
HELD_BY = {
    "preflight": 'frame disk "$tmp"',  # preflight's one round trip (probe.preflight_facts)
    "write release": "/.config.json.XXXXXX",
    "stop server": "kill -s TERM",
    "start server": "setsid ",
}
"""The piece of text of a step's container command the lab's hold catches (lab/hold.py):
the step cannot end until the test releases it. The ready wait and the gate are held by
the new server itself (a 6 s load; a gate that needs more drafts than its budget sees)."""
WAY_BACK = ("roll back to ", "rollback ", "stop failed server", "restore ", "back ")
"""orch's progress lines that begin the way back (`ct201: roll back to X`, a replace's
`restore qwen-dflash X`, a baseline's `back stop server`): the first of them after the
signal ends the stop latency."""


class Orch:
    """`orch deploy --json` (or the command `argv`) as a real process: its progress lines
    (stderr) watched as they come, its output (stdout) read at the end."""

    def __init__(self, lab: LabHandle, *args: str, argv: list[str] | None = None) -> None:
        self.lines: list[str] = []
        self.heard: list[float] = []
        """When each of `lines` was read (time.monotonic)."""
        self.stdout: list[str] = []
        self.signalled = 0.0
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

    def _read(self, pipe: IO[str] | None, into: list[str]) -> None:
        assert pipe
        for line in pipe:
            if into is self.lines:
                self.heard.append(time.monotonic())
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

    def wait_held(self, lab_dir: Path, timeout: float = 180) -> tuple[int, str]:
        """The container command the lab's hold caught (its PID and text), once caught."""
        deadline = time.monotonic() + timeout
        while (caught := hold.held(lab_dir)) is None:
            assert self.process.poll() is None, self.output
            assert time.monotonic() < deadline, f"the hold caught nothing:\n{self.output}"
            time.sleep(hold.WAIT_SECONDS)
        return caught

    def step_now(self, *others: str) -> str:
        """The step of the way forward (or one of `others`) orch last said it is in."""
        steps = [line.rstrip().split(f"{NAME}: ", 1)[-1] for line in list(self.lines)]
        return next(s for s in reversed(steps) if s in FORWARD_STEPS or s in others)

    def signal(self, number: int) -> None:
        self.signalled = time.monotonic()
        self.process.send_signal(number)

    def finish(self, timeout: float = 180) -> int:
        code = self.process.wait(timeout=timeout)
        self.exited = time.monotonic()
        self.seconds_after_signal = self.exited - self.signalled
        for reader in self.readers:
            reader.join(timeout=10)
        return code

    @property
    def seconds_to_way_back(self) -> float:
        """From the signal to orch's first line of the way back; to its exit when it
        had nothing to undo (stopped before the old server stopped)."""
        back = (
            at
            for at, line in zip(self.heard, self.lines, strict=False)
            if at >= self.signalled and any(f"{NAME}: {w}" in line for w in WAY_BACK)
        )
        return next(back, self.exited) - self.signalled

    def step_left_after_signal(self, step: str) -> float:
        """How long `step` went on after the signal, by orch's own timing of it (its
        document's `steps`) from when its line was heard: a step orch finishes rather
        than cuts short (the old server's stop) ends before the way back can begin."""
        began = next(
            at
            for at, line in zip(self.heard, self.lines, strict=False)
            if line.rstrip().endswith(f"{NAME}: {step}")
        )
        [target] = self.document["targets"]
        return max(0.0, began + target["steps"][step] - self.signalled)

    def stop_latency(self) -> dict[str, float]:
        """What the matrix's table shows of a stop: seconds to the way back and to the exit."""
        return {
            "stop_to_way_back_seconds": round(self.seconds_to_way_back, 2),
            "stop_to_exit_seconds": round(self.seconds_after_signal, 2),
        }

    @property
    def document(self) -> dict:
        return json.loads("".join(self.stdout))

    @property
    def output(self) -> str:
        return "".join(self.lines + self.stdout)


FORWARD_STEPS = (
    "preflight",
    "write release",
    "cat-verify",
    "stop server",
    "switch current",
    "start server",
    "wait ready",
    "gate",
    "settle",
)


def deployment(lab: LabHandle) -> Path:
    return lab.deployment_dir(NAME)


def lab_dir(lab: LabHandle) -> Path:
    """The container's `lab/` directory: its knobs, the hold among them."""
    return ContainerPaths(deployment(lab).parents[4]).lab


@contextmanager
def holding(lab: LabHandle, piece: str, cut_after: int | None = None) -> Iterator[Path]:
    """The container's commands whose text holds `piece` held (or their stdin cut after
    `cut_after` bytes) until released (`hold.release`), at the latest on the way out."""
    where = lab_dir(lab)
    hold.hold(where, piece, cut_after)
    try:
        yield where
    finally:
        hold.release(where)


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


UNDO_SECONDS = 60.0
"""From the first step of the way back to the exit: the previous release stopped,
started, made ready and gated again on the lab under a busy machine."""


def stop_in_step(
    lab: LabHandle, run: Orch, step: str, number: int, held_by: str | None = None
) -> None:
    """`number` sent while `run` is in `step`, held there by the lab's hold (or by its
    server; a step not in HELD_BY by the command holding `held_by`), checked to be there."""
    held_by = held_by or HELD_BY.get(step)
    if held_by:
        _, text = run.wait_held(lab_dir(lab))
        assert held_by in text
    run.wait_for_step(step)
    assert run.step_now(step) == step, run.output
    run.signal(number)
    hold.release(lab_dir(lab))


def assert_stopped_at_once(
    run: Orch, record_property: RecordProperty, bound: float = STOP_SECONDS
) -> None:
    """The stop was acted on within `bound` (a poll interval and one safe step), the
    way back then finished within its own bound; both recorded for the matrix's table."""
    for name, seconds in run.stop_latency().items():
        record_property(name, seconds)
    assert run.seconds_to_way_back < bound, run.output
    assert run.seconds_after_signal < run.seconds_to_way_back + UNDO_SECONDS, run.output


# -- the invariants every case ends on (the matrix module's docstring) -----------------------


def current(lab: LabHandle) -> str:
    return deployment(lab).joinpath("current").readlink().name


def plain_deploy(lab: LabHandle, *args: str) -> tuple[int, str]:
    done = lab.orch(*deploy_args(lab, *args))
    return done.code, done.stdout + done.stderr


def good_release(lab: LabHandle) -> tuple[str, dict[str, str]]:
    code, output = plain_deploy(lab)
    assert code == 0, output
    return current(lab), lab_release(lab, NAME, current(lab))


def last_run(lab: LabHandle) -> dict:
    return json.loads(lab.orch("history", "-n", "1", "--json").stdout)["runs"][0]


def assert_invariants(lab: LabHandle, good: str, files: dict[str, str]) -> None:
    assert current(lab) == good
    assert lab_release(lab, NAME, good) == files
    assert not (deployment(lab) / "lock").exists()
    assert not (deployment(lab) / "journal.json").exists()
    status = lab.orch("status", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, "--json")
    assert status.stdout, status.stderr
    [row] = status.json["targets"]
    assert (row["release"], row["server"], row["health"]) == (good, "running", 200), row
    assert (row["state"], row["interrupted"], row.get("error")) == ("serving", None, None), row
    assert_left_clean(lab, row["pid"])


def assert_left_clean(lab: LabHandle, serving: int) -> None:
    """No lock, no journal, and no server process but `serving`: in the machine's process
    table (an orphan shows there whoever started it) and in the stand-in's records."""
    assert not (deployment(lab) / "lock").exists()
    assert not (deployment(lab) / "journal.json").exists()
    container = ContainerPaths(deployment(lab).parents[4])
    assert [r["pid"] for r in server_records(container)] == [serving]
    assert server_processes(lab) == [serving]


def assert_plain_deploy_succeeds(lab: LabHandle) -> None:
    code, output = plain_deploy(lab, "--set", "server.max_model_len=8192")
    assert code == 0, output
