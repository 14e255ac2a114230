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

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest
from faulttools import (
    FAST,
    HELD_BY,
    NAME,
    NEW_RELEASE,
    SLOW_GATE,
    SLOW_LOAD,
    STOP_SECONDS,
    UNDO_SECONDS,
    Orch,
    RecordProperty,
    assert_invariants,
    assert_left_clean,
    assert_plain_deploy_succeeds,
    assert_stopped_at_once,
    current,
    deployment,
    good_release,
    holding,
    lab_dir,
    lab_faults,
    last_run,
    plain_deploy,
    server_processes,
    stop_in_step,
)
from labtools import LabHandle
from releasetree import GROWS, lab_release

from orchestrator.lab import hold
from orchestrator.lab.paths import (
    ContainerPaths,
    pid_alive,
    process_start,
    read_gpus,
    write_json_atomic,
)

pytestmark = [pytest.mark.lab, pytest.mark.faults]
LONG_GATE = [*NEW_RELEASE, "--set", "gate.min_drafts=8000"]  # passes, after several seconds


# -- orch interrupted ----------------------------------------------------------------------------


REACHED = {
    "preflight": {"preflight"},
    "write release": {"write release", "cat-verify"},
    "stop server": {"stop server"},
    "start server": {"start server", "wait ready"},  # the ready wait returns at the stop
    "wait ready": {"wait ready"},
    "gate": {"gate"},
}
"""The last step of the way forward a run stops after, by the step its signal landed in:
the step itself, or the next one where no safe point lies between them."""


@pytest.mark.parametrize("step", list(REACHED))
def test_sigint_at_each_step_goes_back_and_exits_130(
    lab: LabHandle, step: str, record_property: RecordProperty
) -> None:
    good, files = good_release(lab)
    before = serving_pid(lab)
    with holding(lab, HELD_BY[step]) if step in HELD_BY else nullcontext():
        knobs = SLOW_GATE if step == "gate" else SLOW_LOAD
        run = Orch(lab, *NEW_RELEASE, *knobs)
        stop_in_step(lab, run, step, signal.SIGINT)
        assert run.finish() == 130, run.output
    # the old server's stop is finished, not cut short (its process gone, its GPU memory
    # free, before the previous release may start again): the bound counts from its end
    finishing = run.step_left_after_signal(step) if step == "stop server" else 0.0
    assert_stopped_at_once(run, record_property, STOP_SECONDS + finishing)
    [target] = run.document["targets"]
    forward = [name for name in target["steps"] if not name.startswith("rollback ")]
    assert forward[-1] in REACHED[step], forward
    if step in ("preflight", "write release"):  # before the stop: the same server serves on
        assert serving_pid(lab) == before
    assert "interrupted" in run.output
    recorded = last_run(lab)
    assert recorded["result"] == "interrupted"
    [target] = recorded["targets"]
    assert (target["result"], target["current"]) == ("interrupted", good)
    assert_invariants(lab, good, files)
    assert_plain_deploy_succeeds(lab)


def test_sigterm_at_the_switch_exits_143_on_the_previous_release(
    lab: LabHandle, record_property: RecordProperty
) -> None:
    good, files = good_release(lab)
    run = Orch(lab, *SLOW_LOAD)
    stop_in_step(lab, run, "wait ready", signal.SIGTERM)
    assert run.finish() == 143, run.output
    assert_stopped_at_once(run, record_property)
    assert "SIGTERM: stopping at the next safe point" in run.output, run.output
    [target] = run.document["targets"]
    forward = [name for name in target["steps"] if not name.startswith("rollback ")]
    assert forward[-1] == "wait ready", forward
    assert last_run(lab)["result"] == "interrupted"
    assert_invariants(lab, good, files)
    assert_plain_deploy_succeeds(lab)


def test_a_second_sigint_during_the_undo_does_not_abandon_it(
    lab: LabHandle, record_property: RecordProperty
) -> None:
    good, files = good_release(lab)
    run = Orch(lab, *SLOW_GATE)
    stop_in_step(lab, run, "gate", signal.SIGINT)
    # A second Ctrl-C as a person gives it: after the first was taken (two signals before
    # the handler runs are one), during the undo.
    first_taken = "SIGINT: stopping at the next safe point"
    run.wait_for_line(lambda line: line.startswith(first_taken), first_taken)
    run.wait_for_step(f"roll back to {good}")
    run.process.send_signal(signal.SIGINT)  # the stop latency counts from the first
    assert run.finish() == 130, run.output
    assert_stopped_at_once(run, record_property)
    assert "SIGINT again: still finishing" in run.output, run.output
    [target] = run.document["targets"]
    forward = [name for name in target["steps"] if not name.startswith("rollback ")]
    assert forward[-1] == "gate", forward
    assert_invariants(lab, good, files)


@pytest.mark.parametrize(("step", "knobs"), [("wait ready", SLOW_LOAD), ("gate", LONG_GATE)])
def test_sigkill_then_a_plain_deploy_recovers_by_itself(
    lab: LabHandle, step: str, knobs: list[str]
) -> None:
    good, files = good_release(lab)
    run = Orch(lab, *knobs)
    run.wait_for_step(step)
    journal = json.loads((deployment(lab) / "journal.json").read_text())
    run.signal(signal.SIGKILL)
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
    assert lab_release(lab, NAME, good) == files
    assert not (deployment(lab) / "lock").exists()
    assert not (deployment(lab) / "journal.json").exists()
    assert server_processes(lab) == [serving_pid(lab)]  # no orphan of the killed run
    runs = json.loads(lab.orch("history", "-n", "5", "--json").stdout)["runs"]
    [killed] = [r for r in runs if r["run_id"] == journal["run_id"]]  # recorded after all
    assert killed["result"] == "interrupted" and killed["recovered_by"] == last_run(lab)["run_id"]
    assert (killed["targets"][0]["step"], killed["targets"][0]["current"]) == (step, good)


# -- writes cut: orch killed while a container write streams ------------------------------------


def killed_while_held(lab: LabHandle, run: Orch, piece: str) -> str:
    """orch SIGKILLed (its connection gone) while the lab's hold has the container
    command holding `piece`; the command then let go and waited for. Its text."""
    pid, text = run.wait_held(lab_dir(lab))
    assert piece in text, text
    run.signal(signal.SIGKILL)
    assert run.finish() == -signal.SIGKILL
    hold.release(lab_dir(lab))
    deadline = time.monotonic() + 30
    while pid_alive(pid):  # the writer ends: a cut stdin, or its command run unheard
        assert time.monotonic() < deadline, text
        time.sleep(0.05)
    return text


def assert_next_run_recovers(lab: LabHandle, run_id: str, *args: str) -> tuple[str, str]:
    """The same deploy again, no manual step: it takes the dead run's lock over, recovers
    whatever the dead run left, and deploys. Its output and the release it deployed."""
    code, output = plain_deploy(lab, *args)
    assert code == 0, output
    assert f"took over the deploy lock of run {run_id}" in output, output
    assert not (deployment(lab) / "lock").exists()
    assert not (deployment(lab) / "journal.json").exists()
    # a cut writer dies of SIGPIPE; its trap (container/shell.py exit_on_signals) still
    # removes its temp file
    assert list(deployment(lab).rglob(".*.json.*")) == []
    assert server_processes(lab) == [serving_pid(lab)]
    return output, current(lab)


def test_a_journal_write_cut_mid_stream_keeps_the_last_whole_journal(lab: LabHandle) -> None:
    """The journal's `switch current` write cut after 40 bytes, orch killed: the
    container keeps the `stop server` journal whole and the next run recovers by it."""
    good, files = good_release(lab)
    with holding(lab, "kill -s TERM"):
        run = Orch(lab, *NEW_RELEASE)
        run.wait_held(lab_dir(lab))
        assert run.step_now() == "stop server", run.output
        hold.hold(lab_dir(lab), "/journal.json", cut_after=40)  # lets the stop go
        killed_while_held(lab, run, "/journal.json")
    journal = json.loads((deployment(lab) / "journal.json").read_text())
    assert (journal["step"], journal["from_release"]) == ("stop server", good)

    output, deployed = assert_next_run_recovers(lab, journal["run_id"], *NEW_RELEASE)

    assert f"recovered interrupted run {journal['run_id']} (stopped at 'stop server')" in output
    [target] = last_run(lab)["targets"]
    assert target["recovered"]["back_on"] == good
    assert deployed != good and lab_release(lab, NAME, good) == files


@pytest.mark.parametrize(
    ("what", "piece"), [("manifest", "/.manifest.json.XXXXXX"), ("config", "/.config.json.XXXXXX")]
)
def test_a_release_write_cut_mid_stream_is_written_whole_by_the_next_run(
    lab: LabHandle, what: str, piece: str
) -> None:
    """A release file (its manifest, its config) cut after 100 bytes with orch killed:
    the partial file never takes the file's name; the next run writes the release whole."""
    good, files = good_release(lab)
    with holding(lab, piece, cut_after=100):
        run = Orch(lab, *NEW_RELEASE)
        text = killed_while_held(lab, run, piece)
    [release_id] = set(re.findall(r"/releases/(\w+)/", text))
    release_dir = deployment(lab) / "releases" / release_id
    assert not (release_dir / f"{what}.json").exists()
    assert (current(lab), lab_release(lab, NAME, good)) == (good, files)
    run_id = json.loads((deployment(lab) / "lock" / "owner.json").read_text())["run_id"]

    _, deployed = assert_next_run_recovers(lab, run_id, *NEW_RELEASE)

    assert deployed == release_dir.name
    assert json.loads((release_dir / f"{what}.json").read_text())
    assert lab_release(lab, NAME, good) == files


def test_a_lock_taken_as_the_connection_dies_is_taken_over_by_the_next_run(
    lab: LabHandle,
) -> None:
    """orch killed while its lock is being made: the lock lands with its dead owner in
    it, and the next run takes it over."""
    good, files = good_release(lab)
    with holding(lab, "/.lock.XXXXXX"):
        run = Orch(lab, *NEW_RELEASE)
        killed_while_held(lab, run, "/.lock.XXXXXX")
    owner = json.loads((deployment(lab) / "lock" / "owner.json").read_text())
    assert owner["pid"] == run.process.pid

    assert_next_run_recovers(lab, owner["run_id"], *NEW_RELEASE)
    assert lab_release(lab, NAME, good) == files


def test_an_audit_line_whose_writer_is_killed_is_written_by_the_next_runs_recovery(
    lab: LabHandle,
) -> None:
    """orch killed as it appends its audit line, the writer killed before the line lands:
    the journal (at `gate passed`) is the record, and the next run keeps the gated
    release and audits the dead run's recovery."""
    good_release(lab)
    piece = f" >> {deployment(lab) / 'audit.log'}"
    lines = (deployment(lab) / "audit.log").read_text().splitlines()
    with holding(lab, piece):
        run = Orch(lab, *NEW_RELEASE)
        pid, _ = run.wait_held(lab_dir(lab))
        run.signal(signal.SIGKILL)
        assert run.finish() == -signal.SIGKILL
        os.kill(pid, signal.SIGKILL)  # the writer, before its line
    assert (deployment(lab) / "audit.log").read_text().splitlines() == lines
    journal = json.loads((deployment(lab) / "journal.json").read_text())
    assert journal["step"] == "gate passed"

    _, deployed = assert_next_run_recovers(lab, journal["run_id"], *NEW_RELEASE)

    assert deployed == journal["to_release"]  # gated: kept
    [target] = last_run(lab)["targets"]
    assert (target["recovered"]["run_id"], target["recovered"]["back_on"]) == (
        journal["run_id"],
        journal["to_release"],
    )
    audit = (deployment(lab) / "audit.log").read_text().splitlines()[len(lines) :]
    assert [json.loads(line)["action"] for line in audit] == ["recover", "deploy"], audit


# -- faults inside a run (these passed before the journal; kept as regressions) ------------------


COUNTERS = ["--set", "gate.acceptance_source=counters"]
"""The gate reading /metrics counter deltas (per-request figures need no /metrics)."""


@pytest.mark.parametrize(
    ("faults", "source", "verdict_words"),
    [
        ({"crash_after_ready_seconds": 0.0}, [], "did not become ready"),
        ({"hang_while_loading": True}, [], "not ready after"),
        ({"garbage_metrics": True}, COUNTERS, "could not measure"),
    ],
)
def test_a_faulty_new_server_is_rolled_back(
    lab: LabHandle, faults: dict, source: list[str], verdict_words: str
) -> None:
    good, files = good_release(lab)
    code, output = plain_deploy(lab, "--set", "gate.ready_timeout=3", *source, *lab_faults(faults))
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
    # the refused run took nothing: the lock and any journal are the first run's
    owner = json.loads((deployment(lab) / "lock" / "owner.json").read_text())
    assert owner["pid"] == first.process.pid, owner
    journal = deployment(lab) / "journal.json"
    assert not journal.exists() or json.loads(journal.read_text())["run_id"] == owner["run_id"]
    assert first.finish() == 0, first.output
    assert_left_clean(lab, serving_pid(lab))
    assert_plain_deploy_succeeds(lab)
    assert_left_clean(lab, serving_pid(lab))
    assert current(lab) != good and lab_release(lab, NAME, good) == files


def test_a_lock_held_by_a_live_run_elsewhere_is_refused_until_unlocked(lab: LabHandle) -> None:
    good, files = good_release(lab)
    lock = deployment(lab) / "lock"
    lock.mkdir()
    owner = {"run_id": "r-elsewhere", "user": "alice", "control_host": "other", "pid": 1}
    (lock / "owner.json").write_text(json.dumps({**owner, "since": time.time()}))
    code, output = plain_deploy(lab, "--set", "server.max_model_len=8192")
    assert code == 3 and "alice" in output and "orch unlock" in output
    assert current(lab) == good and lab_release(lab, NAME, good) == files
    unlock = ("unlock", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME)
    refused = lab.orch(*unlock)  # its heartbeat is within the lease: that run may be at work
    assert refused.code == 3 and "r-elsewhere" in refused.stdout
    unlocked = lab.orch(*unlock, "--force")
    assert unlocked.code == 0 and "r-elsewhere" in unlocked.stdout
    assert_invariants(lab, good, files)
    assert_plain_deploy_succeeds(lab)


# -- issue 19: nothing half-written, nothing stolen, nothing unverified --------------------------


def serving_pid(lab: LabHandle) -> int:
    status = lab.orch("status", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, "--json")
    [row] = status.json["targets"]
    assert row["state"] == "serving", row
    return int(row["pid"])


def test_a_journal_cut_to_nothing_does_not_stop_the_next_plain_deploy(lab: LabHandle) -> None:
    """What a cut write used to leave: the next run infers from the container and says so."""
    good, files = good_release(lab)
    (deployment(lab) / "journal.json").write_bytes(b"")

    code, output = plain_deploy(lab)

    assert code == 0, output
    assert "journal.json is unreadable (empty)" in output
    assert f"inferred from the container: current names {good}" in output
    assert "nothing to undo" in output
    [target] = last_run(lab)["targets"]
    assert target["recovered"]["inferred"] and target["recovered"]["back_on"] == good
    audit = (deployment(lab) / "audit.log").read_text().splitlines()
    assert json.loads(audit[-2])["action"] == "recover"  # the interrupted run's record finished
    assert_invariants(lab, good, files)
    assert_plain_deploy_succeeds(lab)


def test_a_new_release_whose_completions_all_fail_is_rolled_back(lab: LabHandle) -> None:
    good, files = good_release(lab)

    code, output = plain_deploy(lab, *lab_faults({"fail_completions": True}))

    assert code == 1, output
    assert "probe requests failed" in output and "HTTP 500" in output
    [target] = last_run(lab)["targets"]
    assert (target["result"], target["current"]) == ("rolled_back", good)
    phase = target["gate"]["by_context"][0]
    # every request that ended failed; the phase cancelled the rest once it had decided
    assert phase["request_errors"] == phase["requests"] - phase["cancelled_requests"] > 0
    assert_invariants(lab, good, files)
    assert_plain_deploy_succeeds(lab)


def test_a_live_runs_lock_outlives_its_lease_by_its_heartbeat(lab: LabHandle) -> None:
    """Lease 5 s, a gate of ~15 s: the second deploy finds a fresh heartbeat and a live PID."""
    good, files = good_release(lab)
    lease = ["--set", "lock_lease=5"]
    first = Orch(
        lab, *lease, *NEW_RELEASE, "--set", "gate.min_drafts=100000", "--set", "gate.time_budget=15"
    )
    first.wait_for_step("gate")
    time.sleep(8)  # past the lease

    code, output = plain_deploy(lab, *lease, "--set", "server.max_model_len=8192")

    assert code == 3, output
    assert re.search(
        r"deploy lock held by run \S+ of \S+@\S+ \d+[smhd] ago \(pid \d+\), heartbeat", output
    )
    assert "took over" not in output
    assert first.finish() == 1, first.output  # its own gate was undecided: rolled back
    assert "took over" not in first.output
    assert_invariants(lab, good, files)
    assert_plain_deploy_succeeds(lab)


def test_rolling_back_to_a_release_edited_by_hand_is_refused(lab: LabHandle) -> None:
    old, _ = good_release(lab)
    code, output = plain_deploy(lab, *NEW_RELEASE)
    assert code == 0, output
    new, new_files = current(lab), lab_release(lab, NAME, current(lab))
    pid = serving_pid(lab)
    edited = deployment(lab) / "releases" / old / "config.json"
    config = json.loads(edited.read_text())
    edited.write_text(json.dumps({**config, "hand_edit": True}, indent=2) + "\n")

    done = lab.orch("rollback", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, *FAST)

    assert done.code == 1, done.stdout + done.stderr
    text = done.stdout + done.stderr
    assert f"release {old} changed on the target" in text and "--force" in text
    assert '+  "hand_edit": true' in text  # the diff against what its run applied
    assert (current(lab), serving_pid(lab)) == (new, pid)
    assert lab_release(lab, NAME, new) == new_files
    assert_invariants(lab, new, new_files)


REGATED = GROWS | {"manifest.json"}
"""What a gate-only change writes in the kept release: its manifest's gate settings."""


def test_a_gate_only_change_regates_without_a_restart(lab: LabHandle) -> None:
    good, _ = good_release(lab)
    before = lab_release(lab, NAME, good, unread=REGATED)
    pid = serving_pid(lab)

    code, output = plain_deploy(lab, "--set", "gate.min_mean_acceptance_length=1.5")

    assert code == 0, output
    [target] = last_run(lab)["targets"]
    assert target["result"] == "regated" and target["gate"]["verdict"] == "pass"
    assert serving_pid(lab) == pid
    manifest = json.loads((deployment(lab) / "releases" / good / "manifest.json").read_text())
    assert manifest["gate_target"]["gate"]["min_mean_acceptance_length"] == 1.5
    audit = json.loads((deployment(lab) / "audit.log").read_text().splitlines()[-1])
    assert audit["result"] == "regated"
    assert lab_release(lab, NAME, good, unread=REGATED) == before
    assert_left_clean(lab, pid)


def test_a_dead_runs_lock_and_journal_planted_on_the_container_are_recovered(
    lab: LabHandle,
) -> None:
    """The recovery on a real container, not only the in-memory fake: a lock whose owner's
    PID is dead on this host, and its journal stopped at 'wait ready'."""
    good, files = good_release(lab)
    gone = subprocess.Popen(["true"])
    gone.wait()
    owner = {
        "run_id": "r-dead",
        "user": "ops",
        "control_host": socket.gethostname(),
        "pid": gone.pid,
        "since": time.time(),
    }
    lock = deployment(lab) / "lock"
    lock.mkdir()
    (lock / "owner.json").write_text(json.dumps(owner))
    (lock / "heartbeat").touch()
    (deployment(lab) / "journal.json").write_text(
        json.dumps(
            {
                "run_id": "r-dead",
                "action": "deploy",
                "owner": "ops",
                "from_release": good,
                "to_release": good,
                "step": "wait ready",
                "started": "2026-12-03T12:00:00+00:00",
                "updated": "2026-12-03T12:00:05+00:00",
            }
        )
    )

    code, output = plain_deploy(lab)

    assert code == 0, output
    assert f"took over the deploy lock of run r-dead of ops@{socket.gethostname()} " in output
    assert f"its process {gone.pid}" in output
    assert "recovered interrupted run r-dead (stopped at 'wait ready')" in output
    [target] = last_run(lab)["targets"]
    assert (target["recovered"]["run_id"], target["recovered"]["back_on"]) == ("r-dead", good)
    assert_invariants(lab, good, files)


# -- orch baseline interrupted -------------------------------------------------------------------


def baseline_args(lab: LabHandle, *args: str) -> list[str]:
    return ["baseline", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, *FAST, *args]


def assert_no_baseline_left(lab: LabHandle) -> None:
    """Nothing of an interrupted baseline stays: no record, no directory of its own."""
    assert not (deployment(lab) / "baseline.json").exists()
    releases = deployment(lab) / "releases"
    assert not [p.name for p in releases.iterdir() if p.name.startswith("baseline-")]


@pytest.mark.parametrize(
    ("number", "code", "step"),
    [
        (signal.SIGINT, 130, "baseline wait ready"),
        (signal.SIGINT, 130, "baseline speed"),
        (signal.SIGTERM, 143, "baseline wait ready"),
        (signal.SIGTERM, 143, "baseline speed"),
    ],
)
def test_baseline_stopped_at_a_step_ends_on_the_gated_release(
    lab: LabHandle, number: int, code: int, step: str, record_property: RecordProperty
) -> None:
    good, files = good_release(lab)
    run = Orch(lab, argv=baseline_args(lab, "--json", *SLOW_LOAD))
    run.wait_for_step(step)
    run.signal(number)
    assert run.finish() == code, run.output
    for name, seconds in run.stop_latency().items():
        record_property(name, seconds)
    assert run.seconds_after_signal < STOP_SECONDS + UNDO_SECONDS, run.output
    [target] = run.document["targets"]
    assert (target["result"], target["current"]) == ("interrupted", good)
    recorded = last_run(lab)
    assert (recorded["command"], recorded["result"]) == ("baseline", "interrupted")
    assert_no_baseline_left(lab)
    assert_invariants(lab, good, files)
    assert_plain_deploy_succeeds(lab)


@pytest.mark.parametrize("step", ["baseline wait ready", "baseline speed"])
def test_baseline_killed_then_a_plain_baseline_recovers_and_measures(
    lab: LabHandle, step: str
) -> None:
    good, files = good_release(lab)
    run = Orch(lab, argv=baseline_args(lab, "--json", *SLOW_LOAD))
    run.wait_for_step(step)
    journal = json.loads((deployment(lab) / "journal.json").read_text())
    assert (journal["action"], journal["from_release"]) == ("baseline", good)
    run.signal(signal.SIGKILL)
    assert run.finish() == -signal.SIGKILL

    done = lab.orch(*baseline_args(lab, "--json"))  # the same command, no `orch unlock`

    assert done.code == 0, done.stdout + done.stderr
    [target] = done.json["targets"]
    assert (target["result"], target["current"]) == ("measured", good)
    assert (target["recovered"]["run_id"], target["recovered"]["back_on"]) == (
        journal["run_id"],
        good,
    )
    assert json.loads((deployment(lab) / "baseline.json").read_text()) == target["baseline"]
    assert not [p for p in (deployment(lab) / "releases").iterdir() if p.name != good]
    assert_invariants(lab, good, files)


# -- issue 35: a disk that fills during the switch -----------------------------------------------


FILLER = "filler"
"""The file that fills a small disk, in the deployment's dir."""


@contextmanager
def deployment_on_a_small_disk(lab: LabHandle, size: str = "96m") -> Iterator[Path]:
    """The deployment moved onto a tmpfs of its own (`mount` under sudo, as CI's runner
    and scripts/setup.sh give it), so a test can fill that filesystem and nothing else.
    Yields the deployment dir. `size` is above preflight's free-disk floor (64 MiB), so
    the deploy starts. On the way out the deployment, as the test left it, is copied
    back to the disk it came from and the tmpfs unmounted, so the lab's teardown finds
    every server by its recorded PID. Skipped, saying why, where nothing may mount."""
    if subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("no passwordless sudo: a filesystem of its own needs mount")
    home = deployment(lab)
    aside = home.with_name(home.name + ".disk")
    home.rename(aside)
    home.mkdir()
    options = f"size={size},mode=0755,uid={os.getuid()}"
    mounted = subprocess.run(
        ["sudo", "-n", "mount", "-t", "tmpfs", "-o", options, "tmpfs", str(home)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if mounted.returncode != 0:
        home.rmdir()
        aside.rename(home)
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        subprocess.run(["cp", "-a", f"{aside}/.", str(home)], check=True)
        yield home
    finally:
        (home / FILLER).unlink(missing_ok=True)
        shutil.rmtree(aside)
        aside.mkdir()
        subprocess.run(["cp", "-a", f"{home}/.", str(aside)], check=True)
        # a server's log stays open on it until the lab's teardown ends the server
        subprocess.run(["sudo", "-n", "umount", "--lazy", str(home)], check=True, timeout=60)
        home.rmdir()
        aside.rename(home)


def fill(directory: Path) -> int:
    """Write zeros into `directory`'s filesystem until it has no room left; the bytes
    written."""
    written = 0
    with (directory / FILLER).open("wb", buffering=0) as file:
        chunk = bytes(1 << 20)
        while True:
            try:
                written += file.write(chunk) or 0
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        with contextlib.suppress(OSError):  # the last pages, a byte at a time
            while file.write(b"\0"):
                written += 1
    return written


def test_a_disk_that_fills_during_the_switch_ends_on_the_previous_release(
    lab: LabHandle,
) -> None:
    """Issue 35 cause 4: the journal written first at every step, the way back's too,
    made a disk that filled after the old server stopped end with no server at all and
    `current` naming a release that never started. The way back goes on without its
    journal and says so; the previous release serves again."""
    good, files = good_release(lab)
    with deployment_on_a_small_disk(lab) as home:
        run = Orch(lab, *NEW_RELEASE, *SLOW_LOAD)
        run.wait_for_step("wait ready")
        assert fill(home) > 0
        assert run.finish() == 1, run.output
        [target] = run.document["targets"]
        assert (target["result"], target["current"]) == ("rolled_back", good), target
        assert "No space left on device" in target["gate"]["reason"]
        assert any(
            "the journal could not be written" in note and "the way back went on" in note
            for note in target["notes"]
        ), target["notes"]
        assert target["rollback_gate"]["verdict"] == "pass"
        (home / FILLER).unlink()
        assert_invariants(lab, good, files)
        assert_plain_deploy_succeeds(lab)


# -- issue 35: the GPU memory of a server that died ----------------------------------------------


def test_the_gpu_memory_a_dead_servers_workers_hold_is_freed_before_the_next_start(
    lab: LabHandle,
) -> None:
    """Issue 35 cause 3: after a container-wide crash the API server (the recorded PID) was
    gone while a worker of its process group held the GPU memory, and the next deploy was
    refused for it. Preflight now names what holds it, and the stop before the start ends
    that group: the deploy goes through on freed memory."""
    good, _ = good_release(lab)
    container = ContainerPaths(deployment(lab).parents[4])
    crashed = serving_pid(lab)
    os.kill(crashed, signal.SIGKILL)  # the test's own stand-in, by the PID status gave
    # Its place taken by a server whose leader died and whose worker lives on: the leader
    # (setsid: its own group) starts the worker in its group and exits.
    leader = subprocess.Popen(
        ["setsid", "sh", "-c", "sleep 600 & echo $!; read _"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert leader.stdout and leader.stdin
    worker = int(leader.stdout.readline())
    started = process_start(leader.pid)
    leader.stdin.close()
    leader.wait()
    try:
        (deployment(lab) / "server.pid").write_text(f"{leader.pid} {started}\n")
        held = {str(g["index"]): g["memory_total_mib"] * 9 // 10 for g in read_gpus(container)}
        write_json_atomic(
            container.server_record(worker),
            {"pid": worker, "server": "vllm", "start": process_start(worker),
             "port": 8000, "gpu_memory_mib": held},
        )  # fmt: skip  # what the lab's nvidia-smi reports as held by that PID

        code, output = plain_deploy(lab)

        assert code == 0, output
        assert f"the server that died (PID {leader.pid}) left its processes" in output
        assert not pid_alive(worker)
        assert current(lab) == good  # made again from the same inputs: a new manifest
        assert not (deployment(lab) / "lock").exists()
        assert not (deployment(lab) / "journal.json").exists()
        assert server_processes(lab) == [serving_pid(lab)]
    finally:
        if pid_alive(worker):
            os.kill(worker, signal.SIGKILL)
