"""The fault matrix: orch interrupted (SIGINT, SIGTERM, SIGKILL) at each step of a
deploy, and the faults inside a run, each against the same invariants.

orch runs as a real process and gets real signals; the lab's fault knobs make a
step last long enough to be hit (a slow load, a gate that needs many drafts), and
the step is recognised from orch's own progress lines. After every case:

- the previous release is byte-identical and serving (`current`, health 200);
- no server process but the one serving (no orphans);
- no lock left behind, no journal left behind;
- the run is in the history with its documented result and exit status;
- a following plain deploy succeeds with no manual step.

`docs/reliability.md` tabulates these cases.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from labtools import LabHandle
from orchrun import ROOT

from orchestrator.lab.paths import ContainerPaths, server_records

pytestmark = [pytest.mark.lab, pytest.mark.faults]

NAME = "ct201"
FAST = ["--set", "gate.probe.scrape_interval=0.5", "--set", "gate.ready_timeout=60"]


def lab_faults(knobs: dict) -> list[str]:
    """The stand-in's fault knobs for this release, as a YAML string holding JSON."""
    return ["--set", f"server.env.ORCH_LAB_FAULTS={json.dumps(json.dumps(knobs))}"]


SLOW_LOAD = lab_faults({"load_seconds": 6})
# Gate settings are not part of a release's fingerprint: another max_model_len makes it new.
NEW_RELEASE = ["--set", "server.max_model_len=16384"]
SLOW_GATE = [*NEW_RELEASE, "--set", "gate.min_drafts=100000", "--set", "gate.time_budget=60"]
LONG_GATE = [*NEW_RELEASE, "--set", "gate.min_drafts=8000"]  # passes, after several seconds


class Orch:
    """`orch deploy` as a real process whose progress lines are watched as they come."""

    def __init__(self, lab: LabHandle, *args: str) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *deploy_args(lab, *args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=lab.env,
            cwd=ROOT,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout
        for line in self.process.stdout:
            self.lines.append(line)

    def wait_for_step(self, step: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.rstrip().endswith(f"{NAME}: {step}") for line in self.lines):
            assert self.process.poll() is None, self.output
            assert time.monotonic() < deadline, f"never reached {step!r}:\n{self.output}"
            time.sleep(0.05)

    def finish(self, timeout: float = 180) -> int:
        code = self.process.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


def deployment(lab: LabHandle) -> Path:
    return lab.deployment_dir(NAME)


def current(lab: LabHandle) -> str:
    return deployment(lab).joinpath("current").readlink().name


def release_bytes(lab: LabHandle, release: str) -> dict[str, bytes]:
    """What the release was made of (its server's log grows with every start of it)."""
    directory = deployment(lab) / "releases" / release
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != "server.log"
    }


def deploy_args(lab: LabHandle, *args: str) -> list[str]:
    return ["deploy", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, *FAST, *args]


def plain_deploy(lab: LabHandle, *args: str) -> tuple[int, str]:
    done = lab.orch(*deploy_args(lab, *args))
    return done.code, done.stdout + done.stderr


def good_release(lab: LabHandle) -> tuple[str, dict[str, bytes]]:
    code, output = plain_deploy(lab)
    assert code == 0, output
    return current(lab), release_bytes(lab, current(lab))


def last_run(lab: LabHandle) -> dict:
    return json.loads(lab.orch("history", "-n", "1", "--json").stdout)["runs"][0]


def assert_invariants(lab: LabHandle, good: str, files: dict[str, bytes]) -> None:
    assert current(lab) == good
    assert release_bytes(lab, good) == files
    assert not (deployment(lab) / "lock").exists()
    assert not (deployment(lab) / "journal.json").exists()
    status = lab.orch("status", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, "--json")
    [row] = status.json["targets"]
    assert (row["release"], row["server"], row["health"]) == (good, "running", 200), row
    assert (row["state"], row["interrupted"], row.get("error")) == ("serving", None, None), row
    container = ContainerPaths(deployment(lab).parents[4])
    assert [r["pid"] for r in server_records(container)] == [row["pid"]]


def assert_plain_deploy_succeeds(lab: LabHandle) -> None:
    code, output = plain_deploy(lab, "--set", "server.max_model_len=8192")
    assert code == 0, output


# -- orch interrupted ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "knobs"),
    [
        ("preflight", SLOW_LOAD),
        ("write release", SLOW_LOAD),
        ("stop server", SLOW_LOAD),
        ("start server", SLOW_LOAD),
        ("wait ready", SLOW_LOAD),
        ("gate", SLOW_GATE),
    ],
)
def test_sigint_at_each_step_goes_back_and_exits_130(
    lab: LabHandle, step: str, knobs: list[str]
) -> None:
    good, files = good_release(lab)
    run = Orch(lab, *knobs)
    run.wait_for_step(step)
    run.process.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.output
    assert "interrupted" in run.output
    recorded = last_run(lab)
    assert recorded["result"] == "interrupted"
    [target] = recorded["targets"]
    assert (target["result"], target["current"]) == ("interrupted", good)
    assert_invariants(lab, good, files)
    assert_plain_deploy_succeeds(lab)


def test_sigterm_at_the_switch_exits_143_on_the_previous_release(lab: LabHandle) -> None:
    good, files = good_release(lab)
    run = Orch(lab, *SLOW_LOAD)
    run.wait_for_step("wait ready")
    run.process.send_signal(signal.SIGTERM)
    assert run.finish() == 143, run.output
    assert "SIGTERM: stopping at the next safe point" in run.output
    assert last_run(lab)["result"] == "interrupted"
    assert_invariants(lab, good, files)
    assert_plain_deploy_succeeds(lab)


def test_a_second_sigint_during_the_undo_does_not_abandon_it(lab: LabHandle) -> None:
    good, files = good_release(lab)
    run = Orch(lab, *SLOW_GATE)
    run.wait_for_step("gate")
    run.process.send_signal(signal.SIGINT)
    run.wait_for_step(f"roll back to {good}")
    run.process.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.output
    assert "SIGINT again: still finishing" in run.output
    assert_invariants(lab, good, files)


@pytest.mark.parametrize(("step", "knobs"), [("wait ready", SLOW_LOAD), ("gate", LONG_GATE)])
def test_sigkill_then_a_plain_deploy_recovers_by_itself(
    lab: LabHandle, step: str, knobs: list[str]
) -> None:
    good, files = good_release(lab)
    run = Orch(lab, *knobs)
    run.wait_for_step(step)
    journal = json.loads((deployment(lab) / "journal.json").read_text())
    run.process.send_signal(signal.SIGKILL)
    assert run.finish() == -signal.SIGKILL
    assert (deployment(lab) / "lock").exists()  # left behind, with the journal as its record
    status = lab.orch("status", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, "--json")
    assert status.code == 3
    [row] = status.json["targets"]
    assert row["state"] == "interrupted" and journal["run_id"] in row["interrupted"]

    code, output = plain_deploy(lab, *knobs)  # the same inputs, no `orch unlock`

    assert code == 0, output
    assert f"took over the deploy lock of run {journal['run_id']}" in output
    assert f"recovered interrupted run {journal['run_id']}" in output
    [target] = last_run(lab)["targets"]
    assert target["result"] == "deployed"
    assert (target["recovered"]["run_id"], target["recovered"]["back_on"]) == (
        journal["run_id"],
        good,
    )
    assert release_bytes(lab, good) == files
    assert not (deployment(lab) / "lock").exists()
    assert not (deployment(lab) / "journal.json").exists()


# -- faults inside a run (these passed before the journal; kept as regressions) ------------------


@pytest.mark.parametrize(
    ("faults", "verdict_words"),
    [
        ({"crash_after_ready_seconds": 0.0}, "did not become ready"),
        ({"hang_while_loading": True}, "not ready after"),
        ({"garbage_metrics": True}, "could not measure"),
    ],
)
def test_a_faulty_new_server_is_rolled_back(
    lab: LabHandle, faults: dict, verdict_words: str
) -> None:
    good, files = good_release(lab)
    code, output = plain_deploy(lab, "--set", "gate.ready_timeout=3", *lab_faults(faults))
    assert code == 1, output
    assert verdict_words in output
    [target] = last_run(lab)["targets"]
    assert (target["result"], target["current"]) == ("rolled_back", good)
    assert_invariants(lab, good, files)
    assert_plain_deploy_succeeds(lab)


def test_concurrent_deploys_one_wins_the_other_is_refused(lab: LabHandle) -> None:
    good, files = good_release(lab)
    first = Orch(lab, *SLOW_LOAD)
    first.wait_for_step("preflight")
    code, output = plain_deploy(lab, "--set", "server.max_model_len=8192")
    assert code == 3 and "deploy lock held" in output, output
    assert first.finish() == 0, first.output
    assert_plain_deploy_succeeds(lab)
    assert current(lab) != good and release_bytes(lab, good) == files


def test_a_lock_held_by_a_live_run_elsewhere_is_refused_until_unlocked(lab: LabHandle) -> None:
    good, files = good_release(lab)
    lock = deployment(lab) / "lock"
    lock.mkdir()
    owner = {"run_id": "r-elsewhere", "user": "alice", "control_host": "other", "pid": 1}
    (lock / "owner.json").write_text(json.dumps({**owner, "since": time.time()}))
    code, output = plain_deploy(lab, "--set", "server.max_model_len=8192")
    assert code == 3 and "alice" in output and "orch unlock" in output
    assert current(lab) == good and release_bytes(lab, good) == files
    unlocked = lab.orch("unlock", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME)
    assert unlocked.code == 0 and "r-elsewhere" in unlocked.stdout
    assert_invariants(lab, good, files)
    assert_plain_deploy_succeeds(lab)
