"""The fleet command bodies the CLI calls, driven through in-memory connections to
scripted containers (tests/scripted.py): logs, watch, doctor, and deploy and the
server actions on the run skeleton. Each body turns inputs into its document; these
tests read the document as `--json` prints it."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from clocks import FakeClock
from fleets import (
    EXAMPLE,
    FAST,
    Fleet,
    by_name,
    checked,
    with_models,
    write_models,
)
from rundocs import deploy_run
from scripted import Unreachable, serving

from orchestrator.cancel import Cancel
from orchestrator.contract import Action, jsonable
from orchestrator.deadline import SYSTEM_CLOCK, Clock
from orchestrator.documents.watch import Watch
from orchestrator.fleet import runs, skeleton
from orchestrator.fleet.doctor import doctor
from orchestrator.fleet.logs import NO_LOG, follow_logs, logs
from orchestrator.fleet.status import status
from orchestrator.fleet.verify import verify_remote
from orchestrator.fleet.watch import lines, watch_fleet
from orchestrator.history import History
from orchestrator.progress import no_progress
from orchestrator.transaction.options import Options
from orchestrator.transaction.outcome import Outcome
from orchestrator.transport.base import Result
from orchestrator.transport.memory import reply

SERVED = "qwen3.6-27b"
LOG = [f"INFO line {n}" for n in range(1, 8)]


# -- logs --------------------------------------------------------------------------------------


def test_logs_before_any_server_started_say_so_per_container() -> None:
    fleet = Fleet()

    printed, code = logs(fleet.inputs, 20, fleet.connect)

    assert code == 0
    document = checked(printed, "Logs")
    assert [(t["name"], t["result"], t["lines"], t["note"]) for t in document["targets"]] == [
        ("ct129", "ok", [], NO_LOG),
        ("ct200", "ok", [], NO_LOG),
    ]
    assert all(t["log"] is None for t in document["targets"])


@pytest.mark.parametrize("lines", [0, 1, 3, 7, 20])
def test_logs_give_the_last_n_lines_of_each_server_log(lines: int) -> None:
    fleet = Fleet()
    for container in fleet.containers.values():
        container.server_log = list(LOG)

    printed, code = logs(fleet.inputs, lines, fleet.connect)

    assert code == 0
    document = checked(printed, "Logs")
    for target in document["targets"]:
        assert target["lines"] == (LOG[-lines:] if lines else [])
        assert target["log"] == fleet.plans[target["name"]].layout.server_log
        assert "note" not in target and "error" not in target


def test_logs_of_an_unreachable_container_are_its_error_and_exit_3() -> None:
    fleet = Fleet()
    fleet.containers["ct129"].server_log = list(LOG)
    fleet.transports["ct200"] = Unreachable("ct200")

    printed, code = logs(fleet.inputs, 2, fleet.connect)

    assert code == 3
    document = checked(printed, "Logs")
    assert document["result"] == "needs_attention"
    targets = by_name(document)
    assert targets["ct129"]["lines"] == LOG[-2:]
    assert targets["ct200"]["result"] == "unreachable"
    assert "Connection refused" in targets["ct200"]["error"]


def test_following_logs_gives_the_last_lines_then_stops_when_asked() -> None:
    fleet = Fleet()
    fleet.containers["ct129"].server_log = list(LOG)
    stop = threading.Event()
    emitted: list[tuple[str, str]] = []
    warned: list[tuple[str, str]] = []

    def emit(name: str, line: str) -> None:
        emitted.append((name, line))
        stop.set()  # one round: the follow ends at its next wait

    follow_logs(fleet.inputs, 2, emit, lambda n, r: warned.append((n, r)), stop, fleet.connect)

    assert emitted == [("ct129", line) for line in LOG[-2:]]
    assert warned == [("ct200", NO_LOG)]


# -- watch -------------------------------------------------------------------------------------


def watched(
    fleet: Fleet, rounds: int, once: bool, window: float, clock: Clock = SYSTEM_CLOCK
) -> tuple[list[Watch], int]:
    """`orch watch` for `rounds` rounds (a stop that answers at once: no waiting; a
    scrape's retries wait on `clock`)."""
    documents: list[Watch] = []
    asked = iter(range(1, 1000))
    code = watch_fleet(
        fleet.inputs,
        5.0,
        window,
        once,
        documents.append,
        lambda _seconds: next(asked) >= rounds,
        fleet.connect,
        clock,
    )
    return documents, code


def test_watch_once_with_no_window_prints_one_round() -> None:
    fleet = Fleet("gate.min_drafts=50")
    for transport in fleet.containers.values():
        transport.run_server()
        serving(transport.transport, SERVED)

    documents, code = watched(fleet, rounds=5, once=True, window=0.0)

    [document] = [checked(d, "Watch") for d in documents]
    assert [t["name"] for t in document["targets"]] == ["ct129", "ct200"]
    assert document["thresholds"]["min_drafts"] == 50
    assert code in (0, 1)


def test_watch_shows_a_run_paused_for_a_decision_and_how_to_decide() -> None:
    fleet = Fleet("gate.min_drafts=50")
    for container in fleet.containers.values():
        container.run_server()
        serving(container.transport, SERVED)
    paused = fleet.plans["ct200"].layout
    fleet.containers["ct200"].files[paused.journal] = json.dumps(
        {
            "run_id": "run-paused",
            "action": "deploy",
            "owner": "ops@ctl",
            "from_release": "a1b2c3d4e5f6",
            "to_release": "f6e5d4c3b2a1",
            "step": "paused",
            "started": "2026-12-04T22:00:00+00:00",
            "updated": "2026-12-04T22:01:00+00:00",
        }
    ).encode()

    documents, _ = watched(fleet, rounds=1, once=False, window=600.0)

    by = {t["name"]: t for t in checked(documents[-1], "Watch")["targets"]}
    assert "paused" not in by["ct129"]
    assert by["ct200"]["paused"]["run_id"] == "run-paused"
    assert by["ct200"]["paused"]["release"] == "f6e5d4c3b2a1"
    assert by["ct200"]["paused"]["decide"]["promote"].startswith("orch promote ")
    [_, line] = lines(documents[-1])
    assert "PAUSED: run run-paused since 2026-12-04T22:01:00+00:00, promote: orch promote" in line


def test_watch_rounds_judge_each_window_against_the_gate() -> None:
    fleet = Fleet("gate.min_drafts=50")
    for transport in fleet.containers.values():
        transport.run_server()
        serving(transport.transport, SERVED)

    documents, code = watched(fleet, rounds=4, once=False, window=600.0)

    assert len(documents) == 4
    last = checked(documents[-1], "Watch")
    assert code == 0 and last["result"] == "ok"
    for target in last["targets"]:
        assert target["acceptance"] == "ok", target
        assert target["mean_acceptance_length"] == pytest.approx(4.0)
        assert target["position1_acceptance"] == pytest.approx(0.9)
        assert target["drafts"] == 300  # four scrapes, 100 drafts apart


@pytest.mark.parametrize(
    ("assignments", "acceptance", "code"),
    [
        (["gate.min_drafts=50"], "ok", 0),
        (["gate.min_drafts=50", "gate.min_mean_acceptance_length=4.5"], "below", 1),
        (["gate.min_drafts=50", "gate.min_position1_acceptance=0.95"], "below", 1),
        (["gate.min_drafts=10000"], "too_few_drafts", 0),
    ],
)
def test_each_round_is_judged_against_the_playbooks_thresholds(
    assignments: list[str], acceptance: str, code: int
) -> None:
    fleet = Fleet(*assignments)
    for container in fleet.containers.values():
        container.run_server()
        serving(container.transport, SERVED)

    documents, exit_code = watched(fleet, rounds=3, once=False, window=600.0)

    last = checked(documents[-1], "Watch")
    assert [t["acceptance"] for t in last["targets"]] == [acceptance, acceptance]
    assert exit_code == code


def test_watch_once_prints_nothing_until_its_window_is_full() -> None:
    fleet = Fleet("gate.min_drafts=50")
    for container in fleet.containers.values():
        container.run_server()
        serving(container.transport, SERVED)

    documents, _ = watched(fleet, rounds=3, once=True, window=600.0)

    assert documents == []


def test_a_container_whose_metrics_cannot_be_read_is_unreachable_exit_3() -> None:
    fleet = Fleet("gate.min_drafts=50")
    fleet.containers["ct129"].run_server()
    serving(fleet.containers["ct129"].transport, SERVED)
    fleet.transports["ct200"] = Unreachable("ct200")

    documents, code = watched(fleet, rounds=2, once=False, window=600.0)

    assert code == 3
    targets = by_name(checked(documents[-1], "Watch"))
    assert targets["ct200"]["acceptance"] == "unreachable"
    assert targets["ct129"]["acceptance"] != "unreachable"


@pytest.mark.parametrize("once", [True, False])
def test_a_container_with_nothing_deployed_says_so_and_is_no_fault(once: bool) -> None:
    """As `orch status` says it (exit 0); a deployed container whose server does not
    answer is still one that cannot be read (exit 3)."""
    fleet = Fleet("gate.min_drafts=50")
    fleet.deployed("ct129")
    fleet.containers["ct129"].server = None  # its server gone: /metrics does not answer

    documents, code = watched(fleet, rounds=2, once=once, window=0.0, clock=FakeClock())

    targets = by_name(checked(documents[-1], "Watch"))
    assert targets["ct200"]["acceptance"] == "nothing_deployed"
    assert targets["ct129"]["acceptance"] == "unreachable"
    assert code == 3
    assert "nothing deployed" in next(line for line in lines(documents[-1]) if "ct200" in line)

    alone = Fleet("gate.min_drafts=50")
    documents, code = watched(alone, rounds=2, once=once, window=0.0, clock=FakeClock())
    assert (code, documents[-1].result) == (0, "ok")
    assert {t.acceptance for t in documents[-1].targets} == {"nothing_deployed"}


# -- doctor ------------------------------------------------------------------------------------


def doctor_fleet(*unreachable: str) -> Fleet:
    """Logins that work (`true` answers), but for the `unreachable` containers."""
    fleet = Fleet()
    for container in fleet.containers.values():
        container.transport.on("true", reply())
    for name in unreachable:
        fleet.transports[name] = Unreachable(name)
    return fleet


def test_doctor_without_a_playbook_checks_logins_containers_and_gpus() -> None:
    fleet = doctor_fleet()

    printed, code = doctor(EXAMPLE, None, [], [], fleet.connect)

    document = jsonable(printed)
    assert document["kind"] == "Doctor"
    checks = {
        (t["name"], c["check"]): c["status"] for t in document["targets"] for c in t["checks"]
    }
    assert checks[("ct129", "container")] == "ok"
    assert checks[("ct129", "nvidia-smi")] == "fail"  # the scripted container has no GPU
    assert code == 3 and document["result"] == "needs_attention"


def test_doctor_says_a_container_whose_login_fails_is_not_checked() -> None:
    fleet = doctor_fleet("ct129")

    printed, code = doctor(EXAMPLE, None, ["ct129"], [], fleet.connect)

    document = jsonable(printed)
    assert code == 3
    statuses = [(c["check"], c["status"]) for t in document["targets"] for c in t["checks"]]
    assert ("container", "fail") in statuses
    details = [c["detail"] for t in document["targets"] for c in t["checks"]]
    assert any(d.startswith("not checked: ") for d in details), details


def test_doctor_checks_each_login_once_under_its_own_name_in_the_order_checked() -> None:
    fleet = doctor_fleet()

    printed, _ = doctor(EXAMPLE, None, [], [], fleet.connect)

    checks = [
        (t["name"], [(c["check"], c["status"]) for c in t["checks"]])
        for t in jsonable(printed)["targets"]
    ]
    assert checks == [
        ("ct129", [("login", "ok"), ("container", "ok"), ("nvidia-smi", "fail")]),
        ("pve-train", [("login", "ok")]),
        ("ct200", [("container", "ok"), ("nvidia-smi", "fail")]),
    ]


# -- runs on the skeleton ----------------------------------------------------------------------


def options(run_id: str = "20261203T100000Z-cccccc", **given: Any) -> Options:
    return Options(run_id=run_id, user="ops", **given)


@pytest.fixture
def ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """Both containers with the model dirs and a ready vLLM; this test's own history."""
    monkeypatch.setenv("ORCH_STATE_DIR", str(tmp_path / "state"))
    fleet = Fleet(*FAST)
    with_models(fleet, write_models(tmp_path))
    for container in fleet.containers.values():
        serving(container.transport, SERVED)
    return fleet


def interrupted_deploy(fleet: Fleet) -> tuple[dict[str, Any], int]:
    """A deploy told to stop before it began: every container skipped, nothing touched."""
    cancel = Cancel()
    cancel.request(signal.SIGINT)
    printed, code = runs.deploy(fleet.inputs, options(), fleet.connect, no_progress, cancel)
    assert code == cancel.exit_code
    return checked(printed, "DeployRun"), code


def test_an_interrupted_deploy_skips_every_container_and_is_recorded(ready: Fleet) -> None:
    before = {name: dict(c.files) for name, c in ready.containers.items()}

    document, _ = interrupted_deploy(ready)

    assert document["result"] == "interrupted"
    assert {t["result"] for t in document["targets"]} == {"skipped"}
    assert all("not started: the run was interrupted" in t["error"] for t in document["targets"])
    assert {name: c.files for name, c in ready.containers.items()} == before
    assert document["run_id"] in {row.run_id for row in History().last(5, None, None, None)}


def test_every_run_document_names_its_inputs_and_its_log(ready: Fleet) -> None:
    document, _ = interrupted_deploy(ready)

    assert document["playbook"] == "qwen-dflash"
    assert document["method"] == "dflash"
    assert document["inventory"] == str(EXAMPLE.resolve())
    assert document["assignments"] == FAST
    log = Path(document["log"]).read_text()
    assert "deploy qwen-dflash by ops: ct129 on " in log
    assert "result interrupted (exit 130)" in log


def run_action(fleet: Fleet, action: Action, run_id: str) -> tuple[dict[str, Any], int]:
    printed, code = runs.server_action(
        fleet.inputs, options(run_id), action, fleet.connect, no_progress, Cancel(), FakeClock()
    )
    return checked(printed, "ServerRun"), code


def scripted_as(fleet: Fleet, state: str) -> None:
    """Every container `serving` (a deploy's release, its server running), `stopped`
    (the same, its server gone) or with `nothing` deployed."""
    for name, container in fleet.containers.items():
        if state != "nothing":
            fleet.deployed(name)
        if state == "stopped":
            container.server = None


NOT_DEPLOYED = "nothing deployed here to {action} (orch deploy first)"


@pytest.mark.parametrize(
    ("before", "action", "results", "code", "after"),
    [
        ("serving", "stop", ["stopped", "stopped"], 0, "stopped"),
        ("serving", "start", ["unchanged", "unchanged"], 0, "serving"),
        ("serving", "restart", ["restarted", "restarted"], 0, "serving"),
        ("serving", "remove", ["removed", "removed"], 0, "nothing_deployed"),
        ("stopped", "stop", ["unchanged", "unchanged"], 0, "stopped"),
        ("stopped", "start", ["started", "started"], 0, "serving"),
        ("stopped", "restart", ["restarted", "restarted"], 0, "serving"),
        ("stopped", "remove", ["removed", "removed"], 0, "nothing_deployed"),
        ("nothing", "stop", ["unchanged", "unchanged"], 0, "nothing_deployed"),
        # the canary fails: the rollout's failure budget is spent, the rest is skipped
        ("nothing", "start", ["failed", "skipped"], 2, "nothing_deployed"),
        ("nothing", "restart", ["failed", "skipped"], 2, "nothing_deployed"),
        ("nothing", "remove", ["removed", "removed"], 0, "nothing_deployed"),
    ],
)
def test_a_server_action_on_the_skeleton_then_status(
    ready: Fleet, before: str, action: Action, results: list[str], code: int, after: str
) -> None:
    scripted_as(ready, before)

    document, exit_code = run_action(ready, action, "20261203T120000Z-eeeeee")

    assert (exit_code, document["action"]) == (code, action), document
    assert [t["result"] for t in document["targets"]] == results
    if "failed" in results:
        assert document["targets"][0]["error"] == NOT_DEPLOYED.format(action=action)
    read, status_code = status(ready.inputs, ready.connect)
    assert (checked(read, "Status")["state"], status_code) == (after, 0)
    [row, *_] = History().last(5, None, None, None)
    assert (row.run_id, row.result) == ("20261203T120000Z-eeeeee", document["result"])


def test_a_server_action_on_an_unreachable_container_is_its_outcome(ready: Fleet) -> None:
    ready.deployed("ct129")
    ready.transports["ct200"] = Unreachable("ct200")

    document, code = run_action(ready, "stop", "20261203T140000Z-abcdef")

    assert code == 3
    targets = by_name(document)
    assert targets["ct129"]["result"] == "stopped"
    assert "Connection refused" in targets["ct200"]["error"]


@pytest.mark.parametrize(
    ("diffs", "dry_run_code", "code", "result"),
    [
        ([None, None], 0, 0, "ok"),
        ([None, "--- a\n+++ b\n"], 0, 1, "not_applied"),
        ([None, None], 1, 2, "bad_input"),  # preflight found an error
        ([None, None], 3, 3, "needs_attention"),
    ],
)
def test_diff_says_in_its_result_what_its_exit_status_says(
    diffs: list[str | None], dry_run_code: int, code: int, result: str
) -> None:
    """Issue 33 item 4: `diff --json` exiting 1 says so in `result` (it said `ok`)."""
    targets = [Outcome(f"ct{i}", "pve1", "dry_run", diff=d) for i, d in enumerate(diffs)]

    document, exit_code = runs.as_diff(deploy_run(targets), dry_run_code)

    assert (exit_code, document.result) == (code, result)


def test_a_run_whose_history_record_fails_says_it_is_missing_and_exits_3(
    ready: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(skeleton, "RECORD_RETRY_SECONDS", 0.0)
    (tmp_path / "state" / "history.sqlite").mkdir(parents=True)  # the record cannot be written

    printed, code = runs.deploy(
        ready.inputs, options(), ready.connect, no_progress, Cancel(), clock=FakeClock()
    )

    document = checked(printed, "DeployRun")
    assert {t["result"] for t in document["targets"]} == {"deployed"}, document["targets"]
    assert code == 3
    [warning] = document["warnings"]
    assert "could not record the run" in warning and "tried 3 times" in warning
    assert f"its log is {document['log']}" in warning


def test_verify_config_reuses_the_verdict_a_deploy_kept_and_rechecks_when_asked(
    ready: Fleet,
) -> None:
    stage = {"name": "parser", "status": "ok", "detail": "", "seconds": 9.0}
    passed = json.dumps({"version": "0.32.0", "stages": [stage], "seconds": 9.0}).encode()
    checks: list[str] = []
    for name, container in ready.containers.items():
        container.install = b"/opt/vllm/lib/python3/site-packages/vllm-0.32.0.dist-info/RECORD\n"
        container.transport.on(
            "validate_launch",
            lambda argv, _, name=name: checks.append(name) or Result(tuple(argv), 0, passed, b""),
        )
    deployed, _ = runs.deploy(
        ready.inputs, options(), ready.connect, no_progress, Cancel(), clock=FakeClock()
    )
    assert {t["result"] for t in checked(deployed, "DeployRun")["targets"]} == {"deployed"}
    assert sorted(checks) == ["ct129", "ct200"]

    printed, code = verify_remote(ready.inputs, ready.connect)

    document = checked(printed, "Verify")
    assert (code, len(checks)) == (0, 2)  # no new check
    for target in document["targets"]:
        kept = json.loads(
            ready.containers[target["name"]].files[ready.plans[target["name"]].layout.server_check]
        )
        assert target["server_check_reused"] == f"{kept['time']} (run {kept['run_id']})"

    printed, code = verify_remote(ready.inputs, ready.connect, recheck=True)

    assert (code, len(checks)) == (0, 4)
    assert all("server_check_reused" not in t for t in checked(printed, "Verify")["targets"])
