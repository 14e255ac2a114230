"""The fault cases of `deploy --replace`: orch interrupted (SIGINT) at each of the
replace's steps, and killed (SIGKILL) in the new release's gate, on a container serving
qwen-dflash that qwen-mtp replaces. After each, the container serves qwen-dflash's
release, gated, with no lock or journal left in either deployment and no other server
process; after SIGKILL the next run recovers by itself (docs/reliability.md)."""

from __future__ import annotations

import json
import signal
from contextlib import nullcontext

import pytest
from faulttools import (
    FAST,
    NAME,
    SLOW_GATE,
    SLOW_LOAD,
    Orch,
    RecordProperty,
    assert_stopped_at_once,
    holding,
    server_processes,
    stop_in_step,
)
from labtools import LabHandle
from releasetree import lab_release

pytestmark = [pytest.mark.lab, pytest.mark.faults]

REPLACE = ["deploy", "qwen-mtp", "--replace", "qwen-dflash"]


def replace(lab: LabHandle, *knobs: str) -> Orch:
    """`deploy qwen-mtp --replace qwen-dflash` as a real process, watched."""
    return Orch(lab, argv=[*REPLACE, "-i", str(lab.inventory), "--limit", NAME, *FAST, *knobs])


def orch(lab: LabHandle, *args: str) -> tuple[int, str]:
    done = lab.orch(*args, "-i", str(lab.inventory), "--limit", NAME, *FAST)
    return done.code, done.stdout + done.stderr


def status(lab: LabHandle, playbook: str) -> dict:
    done = lab.orch("status", playbook, "-i", str(lab.inventory), "--limit", NAME, "--json")
    [row] = done.json["targets"]
    return row


def serving_dflash(lab: LabHandle) -> str:
    code, output = orch(lab, "deploy", "qwen-dflash")
    assert code == 0, output
    return status(lab, "qwen-dflash")["release"]


def dflash_release(lab: LabHandle, release: str) -> dict[str, str]:
    return lab_release(lab, NAME, release, "qwen-dflash")


def assert_back_on_dflash(lab: LabHandle, dflash: str, files: dict[str, str]) -> None:
    """qwen-dflash's release, whole as it was (`files`), serving and gated; qwen-mtp's
    server stopped; no lock or journal in either deployment; no other server process."""
    assert dflash_release(lab, dflash) == files
    row = status(lab, "qwen-dflash")
    assert (row["state"], row["release"], row["health"]) == ("serving", dflash, 200), row
    assert row["release_gate"]["result"] == "pass", row
    assert status(lab, "qwen-mtp")["server"] != "running"
    for playbook in ("qwen-dflash", "qwen-mtp"):
        directory = lab.deployment_dir(NAME, playbook)
        assert not (directory / "lock").exists(), playbook
        assert not (directory / "journal.json").exists(), playbook
    assert server_processes(lab) == [row["pid"]]


STOP_REPLACED = "stop qwen-dflash's server (replaced by qwen-mtp)"


@pytest.mark.parametrize(
    ("step", "knobs"),
    [(STOP_REPLACED, SLOW_LOAD), ("wait ready", SLOW_LOAD), ("gate", SLOW_GATE)],
)
def test_sigint_in_a_replace_restores_the_replaced_server(
    lab: LabHandle, step: str, knobs: list[str], record_property: RecordProperty
) -> None:
    dflash = serving_dflash(lab)
    files = dflash_release(lab, dflash)
    with holding(lab, "kill -s TERM") if step == STOP_REPLACED else nullcontext():
        run = replace(lab, *knobs)
        stop_in_step(
            lab, run, step, signal.SIGINT, "kill -s TERM" if step == STOP_REPLACED else None
        )
        assert run.finish() == 130, run.output
    assert_stopped_at_once(run, record_property)
    assert "qwen-dflash restored" in run.output
    assert_back_on_dflash(lab, dflash, files)
    code, output = orch(lab, *REPLACE)  # and the switch still works afterwards
    assert code == 0, output


def test_sigkill_in_a_replace_then_the_next_run_restores_and_replaces(lab: LabHandle) -> None:
    dflash = serving_dflash(lab)
    files = dflash_release(lab, dflash)
    run = replace(lab, *SLOW_GATE)
    run.wait_for_step("gate")
    journal = json.loads((lab.deployment_dir(NAME, "qwen-mtp") / "journal.json").read_text())
    assert journal["replaced"]["playbook"] == "qwen-dflash"
    assert journal["replaced"]["release"] == dflash
    run.process.send_signal(signal.SIGKILL)
    assert run.finish() == -signal.SIGKILL
    mtp = status(lab, "qwen-mtp")
    assert mtp["state"] == "interrupted" and journal["run_id"] in mtp["interrupted"]

    # The next run of the replacing playbook, without --replace: it restores qwen-dflash.
    code, output = orch(lab, "stop", "qwen-mtp")

    assert code == 0, output
    assert f"recovered interrupted run {journal['run_id']}" in output
    assert_back_on_dflash(lab, dflash, files)
    audit = (lab.deployment_dir(NAME) / "audit.log").read_text().splitlines()
    assert json.loads(audit[-1])["action"] == "start"  # qwen-dflash's record of its restore

    code, output = orch(lab, *REPLACE)
    assert code == 0, output
    assert status(lab, "qwen-mtp")["state"] == "serving"
    assert status(lab, "qwen-dflash")["state"] == "stopped"


def test_sigkill_in_a_replace_then_a_run_of_the_replaced_playbook_recovers_the_pair(
    lab: LabHandle,
) -> None:
    """Issue 35 cause 13: `orch start qwen-dflash` after the kill recovers qwen-mtp's
    interrupted replace first (its ungated server stopped), then restores qwen-dflash."""
    dflash = serving_dflash(lab)
    files = dflash_release(lab, dflash)
    run = replace(lab, *SLOW_GATE)
    run.wait_for_step("gate")
    run.process.send_signal(signal.SIGKILL)
    assert run.finish() == -signal.SIGKILL

    code, output = orch(lab, "start", "qwen-dflash")

    assert code == 0, output
    assert "qwen-mtp: recovered interrupted run" in output
    assert_back_on_dflash(lab, dflash, files)


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_replace_keeps_the_stopped_playbook_current(
    lab: LabHandle, sent: signal.Signals, record_property: RecordProperty
) -> None:
    """Issue 35 cause 12: qwen-mtp, deployed and then stopped by qwen-dflash's
    --replace, keeps its release current when its next --replace is interrupted."""
    serving_dflash(lab)
    code, output = orch(lab, *REPLACE)
    assert code == 0, output
    mtp = status(lab, "qwen-mtp")["release"]
    dflash = serving_dflash_replacing_mtp(lab)
    files = dflash_release(lab, dflash)
    mtp_files = lab_release(lab, NAME, mtp, "qwen-mtp")
    run = replace(lab, *SLOW_GATE)
    stop_in_step(lab, run, "gate", sent)
    assert run.finish() == 128 + sent, run.output
    assert_stopped_at_once(run, record_property)
    assert f"back on {mtp} (stopped, as before this run)" in run.output
    assert_back_on_dflash(lab, dflash, files)
    assert (status(lab, "qwen-mtp")["state"], status(lab, "qwen-mtp")["release"]) == (
        "stopped",
        mtp,
    )
    assert lab_release(lab, NAME, mtp, "qwen-mtp") == mtp_files


def serving_dflash_replacing_mtp(lab: LabHandle) -> str:
    code, output = orch(lab, "deploy", "qwen-dflash", "--replace", "qwen-mtp")
    assert code == 0, output
    return status(lab, "qwen-dflash")["release"]
