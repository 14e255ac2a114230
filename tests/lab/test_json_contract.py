"""The operator's contract, against real commands on one lab: every `--json` is one
document of docs/json.md, "nothing deployed yet" is a state, tables keep the ids a
user types back whole at any width, results go to stdout and progress to stderr."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from labtools import LabHandle, free_network
from orchrun import ROOT, RunResult, orch

from orchestrator.contract import API_VERSION, run_result
from orchestrator.documents import AnyDocument
from orchestrator.lab.cluster import Lab
from orchestrator.lab.paths import pid_alive

pytestmark = pytest.mark.lab

FAST = ["--set", "gate.probe.scrape_interval=0.25", "--set", "gate.ready_timeout=30"]
DRAFTERS = Path(__file__).parent.parent / "fixtures" / "drafters"
ANSIBLE = Path(__file__).parent.parent / "fixtures" / "ansible"
ENVELOPE = ["kind", "api_version"]


@dataclass
class Fleet:
    """One lab, deployed once; each command's result kept for the assertions."""

    handle: LabHandle
    tmp: Path
    runs: dict[str, RunResult] = field(default_factory=dict)

    def orch(self, *args: str, columns: int = 200, **env: str) -> RunResult:
        self.handle.env["COLUMNS"] = str(columns)
        self.handle.env.update(env)
        try:
            return self.handle.orch(*args)
        finally:
            for key in env:
                self.handle.env.pop(key)

    def pb(self, command: str, *args: str, columns: int = 200) -> RunResult:
        inventory = str(self.handle.inventory)
        return self.orch(command, "qwen-dflash", "-i", inventory, *args, columns=columns)


def _cli(env: dict[str, str], *args: str) -> RunResult:
    return orch(*args, env=env)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """`orch lab up --json`, one deploy; `orch lab down --json` at the end, its stopped
    PIDs checked gone. (Nothing deployed yet as a state: tests/test_operations.py.)"""
    tmp = tmp_path_factory.mktemp("contract")
    env = {**os.environ, "ORCH_STATE_DIR": str(tmp / "state"), "NO_COLOR": "1"}
    lab_dir = tmp / "lab"
    up = _cli(
        env, "lab", "up", "--dir", str(lab_dir), "--network", free_network(),
        "--load-seconds", "0.3", "--json",
    )  # fmt: skip
    assert up.code == 0, str(up)
    fleet = Fleet(LabHandle(Lab(lab_dir), env), tmp, {"lab up": up})
    try:
        fleet.runs["deploy"] = fleet.pb("deploy", "--json", *FAST)
        yield fleet
    finally:
        down = _cli(env, "lab", "down", "--dir", str(lab_dir), "--json")
        assert down.code == 0, str(down)
        document = down.json
        AnyDocument.model_validate(document)
        assert document["kind"] == "LabDown" and document["stopped"]
        assert document["result"] == "ok"
        assert not [pid for pid in document["stopped"] if pid_alive(pid)]


def keys_everywhere(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key
            yield from keys_everywhere(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from keys_everywhere(inner)


def checked(result: RunResult, kind: str, code: int = 0) -> dict[str, Any]:
    """The one document on stdout, valid against the schema, with its envelope first and
    its `result` the exit code's word."""
    assert result.code == code, (result.code, result.stderr[-2000:])
    document = result.json
    AnyDocument.model_validate(document)
    assert list(document)[:2] == ENVELOPE
    assert (document["kind"], document["api_version"]) == (kind, API_VERSION)
    assert document["result"] == run_result(code), (kind, document["result"], code)
    assert "container" not in set(keys_everywhere(document))
    return document


TUNE_RESTORED = ["--num-speculative-tokens", "4", "--restore"]
"""One depth, then back to the release it started from: the shared fleet stays as found."""


def test_every_command_prints_one_document_of_the_contract(fleet: Fleet) -> None:
    lab = fleet.handle
    drafter = str(DRAFTERS / "z-lab_Qwen3.6-27B-DFlash.config.json")
    target = str(DRAFTERS / "Qwen3.6-27B.config.json")
    host = lab.lab.nodes()[0]
    discover = [
        "inventory", "discover", "--address", host.address, "--port", str(host.port),
        "--identity-file", str(lab.lab.key), "--known-hosts", str(lab.lab.known_hosts),
    ]  # fmt: skip
    expected = {
        "DeployRun": (fleet.runs["deploy"], 0),
        "LabUp": (fleet.runs["lab up"], 0),
        "Status": (fleet.pb("status", "--json"), 0),
        "Verify": (fleet.pb("verify-config", "--json"), 0),
        "Findings": (
            fleet.orch(
                "verify-config", "--drafter", str(drafter), "--target", str(target), "--json"
            ),
            1,  # the published file lacks use_sliding_window
        ),
        "RollbackRun": (fleet.pb("rollback", "--json", *FAST), 2),  # nothing to go back to
        "Unlock": (fleet.pb("unlock", "--json"), 0),
        "Decide": (fleet.pb("promote", "--json"), 2),  # no run is paused: nothing decided
        "ServerRun": (fleet.pb("start", "--json", *FAST), 0),  # already running: unchanged
        "Releases": (fleet.pb("releases", "--json"), 0),
        "Logs": (fleet.pb("logs", "-n", "5", "--json"), 0),
        "RunLog": (
            fleet.orch("history", "--show", fleet.runs["deploy"].json["run_id"], "--json"),
            0,
        ),
        "History": (fleet.orch("history", "--json"), 0),
        "Report": (fleet.orch("report", fleet.runs["deploy"].json["run_id"], "--json"), 0),
        "Profiles": (fleet.orch("profiles", "--json"), 0),
        "Render": (fleet.pb("render", "--json"), 0),
        "Doctor": (fleet.pb("doctor", "--json"), 0),
        "Inventory": (fleet.orch(*discover, "--json"), 0),
        "Completion": (fleet.orch("completion", "bash", "--json"), 0),
        "Explain": (fleet.orch("explain", "gate.min_drafts", "--json"), 0),
        "Alerts": (fleet.orch("alerts", "qwen-dflash", "--json"), 0),
        "InventoryImport": (
            fleet.orch("inventory", "import", "ansible", str(ANSIBLE / "proxmox.yaml"), "--json"),
            0,
        ),
        "LabStatus": (fleet.orch("lab", "status", "--dir", str(lab.lab.root), "--json"), 0),
        "Tune": (fleet.pb("tune", "--limit", "ct200", *TUNE_RESTORED, "--json", *FAST), 0),
    }
    documents = {kind: checked(result, kind, code) for kind, (result, code) in expected.items()}

    names = {"ct200", "ct201"}
    for kind in (
        "DeployRun", "Status", "Verify", "RollbackRun", "Unlock", "Render", "LabStatus", "Releases",
        "Logs", "ServerRun",
    ):  # fmt: skip
        assert {t["name"] for t in documents[kind]["targets"]} == names, kind
    assert {t["name"] for t in documents["Doctor"]["targets"]} == {"pve1", *names}
    assert {t["name"] for t in documents["Inventory"]["targets"]} == names
    assert [t["name"] for t in documents["InventoryImport"]["targets"]] == ["ct200", "ct201"]
    deployed = {t["name"]: t["release"] for t in documents["DeployRun"]["targets"]}
    assert {t["name"]: t["release"] for t in documents["Status"]["targets"]} == deployed
    assert {t["name"]: t["release"] for t in documents["Render"]["targets"]} == deployed
    assert {t["name"]: t["current"] for t in documents["Releases"]["targets"]} == deployed
    assert all(t["lines"] for t in documents["Logs"]["targets"])
    assert documents["RunLog"]["run_id"] == documents["DeployRun"]["run_id"]
    report = documents["Report"]
    assert report["run"]["run_id"] == documents["DeployRun"]["run_id"]
    assert {s["name"] for s in report["steps"] if s["step"] == "preflight"} == names
    assert any("ct200" in line and "preflight" in line for line in documents["RunLog"]["lines"])
    (first_run,) = [r for r in documents["Releases"]["runs"] if r["action"] == "deploy"][-1:]
    assert {t["name"]: t["release"] for t in first_run["targets"]} == deployed
    assert {t["result"] for t in documents["RollbackRun"]["targets"]} == {"failed"}
    assert documents["RollbackRun"]["result"] == "bad_input"
    assert documents["Findings"]["result"] == "not_applied"
    assert {t["result"] for t in documents["Decide"]["targets"]} == {"error"}
    assert "use_sliding_window" in {f["field"] for f in documents["Findings"]["findings"]}
    assert documents["Findings"]["judged_as"]["kind"] == "dflash"
    run_ids = [run["run_id"] for run in documents["History"]["runs"]]
    assert documents["DeployRun"]["run_id"] in run_ids
    assert documents["Completion"]["script"].startswith("_orch_completion")
    assert documents["Explain"]["field"]["default"] == "200"
    assert documents["Alerts"]["groups"][0]["name"] == "orch-qwen-dflash-recording"
    assert documents["LabUp"]["started"] is True
    tune = documents["Tune"]
    assert (tune["target"], tune["ended"], tune["chosen"]) == ("ct200", "restored", 4)
    assert tune["started_on"] == tune["current"] == deployed["ct200"]  # --restore
    assert tune["final_run_id"] not in (None, tune["steps"][0]["run_id"])  # the rollback
    assert [step["value"] for step in tune["steps"]] == [4]
    assert tune["apply_with"] == "--set server.num_speculative_tokens=4"
    for profile in documents["Profiles"]["profiles"]:
        assert list(profile)[:3] == ["name", "kind", "target"]
        assert all(re.fullmatch(r"[a-z0-9_]+", key) for key in profile), list(profile)
    greedy = {"temperature": 0.0, "top_p": 1.0, "top_k": 0}  # docs/json.md: the default
    run_id = documents["DeployRun"]["run_id"]
    [recorded] = [run for run in documents["History"]["runs"] if run["run_id"] == run_id]
    for document in (documents["DeployRun"], recorded):
        assert [t["gate"]["sampling"] for t in document["targets"]] == [greedy, greedy]
    for status in documents["Status"]["targets"]:
        assert (status["state"], status["server"], status["health"]) == ("serving", "running", 200)
        assert isinstance(status["pid"], int) and status["lock"] is None


def release_ids(fleet: Fleet) -> list[str]:
    return [t["release"] for t in fleet.runs["deploy"].json["targets"]]


@pytest.mark.parametrize("columns", [80, 60])
def test_status_tables_keep_ids_whole_and_say_who_locked(fleet: Fleet, columns: int) -> None:
    owner = fleet.handle.deployment_dir("ct200") / "lock" / "owner.json"
    owner.parent.mkdir()
    since = time.time() - 180
    owner.write_text(
        json.dumps({"run_id": "r-old", "user": "root", "control_host": "ops1", "pid": 1,
                    "since": since})
    )  # fmt: skip
    try:
        shown = fleet.pb("status", columns=columns)
        document = checked(fleet.pb("status", "--json"), "Status", 0)
    finally:
        shutil.rmtree(owner.parent)
    assert shown.code == 0, str(shown)
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    for release in release_ids(fleet):
        assert any(re.search(rf"\b{release}\b", line) for line in lines), (release, shown.stdout)
    lock = document["targets"][0]["lock"]
    assert (lock["user"], lock["control_host"], lock["run_id"]) == ("root", "ops1", "r-old")
    assert "{" not in shown.stdout and "null" not in shown.stdout
    if columns == 80:
        assert "root@ops1 3m ago" in shown.stdout
        assert re.search(r"running pid \d+", shown.stdout)
        assert re.search(r"\b4\.\d\d\b", shown.stdout)  # mean length, 2 decimals
    assert not re.search(r"\d\.\d{3,}", shown.stdout)


@pytest.mark.parametrize("columns", [80, 60])
def test_history_and_run_tables_keep_run_and_release_ids_whole(fleet: Fleet, columns: int) -> None:
    run_id = fleet.runs["deploy"].json["run_id"]
    shown = fleet.orch("history", columns=columns)
    assert shown.code == 0
    assert max(len(line) for line in shown.stdout.splitlines()) <= columns
    assert run_id in shown.stdout
    for release in release_ids(fleet):
        assert release in shown.stdout
    profiles = fleet.orch("profiles", columns=columns)
    for name in [p["name"] for p in fleet.orch("profiles", "--json").json["profiles"]]:
        assert name in profiles.stdout


def test_results_on_stdout_progress_on_stderr(fleet: Fleet) -> None:
    shown = fleet.pb("deploy", *FAST, columns=80)
    assert shown.code == 0, str(shown)
    assert re.search(r"^\s+[\d.]+s ct200: preflight$", shown.stderr, re.M)
    assert "preflight" not in shown.stdout
    assert re.search(r"^ct200\s+unchanged\s", shown.stdout, re.M)
    piped = fleet.pb("deploy", "--json", *FAST)
    assert json.loads(piped.stdout)["kind"] == "DeployRun"  # stdout is the document only
    assert "ct201: preflight" in piped.stderr


def test_each_message_names_its_container_once(fleet: Fleet) -> None:
    inventory = yaml.safe_load(fleet.handle.inventory.read_text())
    vmid = inventory["containers"]["ct200"]["vmid"]
    inventory["containers"]["ct200"]["vmid"] = 999
    changed = fleet.tmp / "wrong-vmid.yaml"
    changed.write_text(yaml.safe_dump(inventory, sort_keys=False))
    args = ["status", "qwen-dflash", "-i", str(changed), "--limit", "ct200"]
    document = checked(fleet.orch(*args, "--json"), "Status", 3)
    (entry,) = document["targets"]
    assert entry["state"] == "unreachable"
    assert entry["error"].startswith("pct exec 999: ") and "ct200" not in entry["error"]
    shown = fleet.orch(*args)
    (line,) = [line for line in shown.stdout.splitlines() if "pct exec 999" in line]
    assert line.count("ct200") == 1, line
    assert vmid != 999


@pytest.mark.parametrize("lab", [{"load_seconds": 8.0}], indirect=True)
def test_a_long_wait_off_a_terminal_prints_heartbeats_with_the_server_log(
    lab: LabHandle,
) -> None:
    shown = lab.orch("deploy", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct200", *FAST)
    assert shown.code == 0, str(shown)
    beats = re.findall(
        r"^\s+([\d.]+)s ct200: wait ready \(up to 30 s\), (\d+) s so far; server log: (.+)$",
        shown.stderr,
        re.M,
    )
    assert len(beats) >= 1, shown.stderr
    assert all("Starting to load model" in log for _, _, log in beats)
    waited = [int(so_far) for _, so_far, _ in beats]
    assert waited == sorted(waited) and waited[-1] >= 5  # the whole wait, not each poll


def test_no_color_keeps_the_live_view_on_a_terminal_without_colour(fleet: Fleet) -> None:
    """stderr on a pseudo-terminal, NO_COLOR=1: the live view (cursor control) is drawn,
    no colour is."""
    controller, terminal = pty.openpty()
    env = {**fleet.handle.env, "NO_COLOR": "1", "COLUMNS": "100", "TERM": "xterm-256color"}
    args = ["deploy", "qwen-dflash", "-i", str(fleet.handle.inventory), "--json", *FAST]
    with subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        stdout=subprocess.PIPE,
        stderr=terminal,
        env=env,
        cwd=ROOT,
    ) as process:
        os.close(terminal)
        drawn = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal's other end closed: the run is over
                break
            if not chunk:
                break
            drawn += chunk
        stdout, _ = process.communicate(timeout=300)
    os.close(controller)
    assert process.returncode == 0, drawn[-2000:]
    assert json.loads(stdout)["kind"] == "DeployRun"
    assert b"\x1b[2K" in drawn or b"\x1b[1A" in drawn  # the live table redrawn in place
    assert b"CONTAINER" in drawn
    assert not re.search(rb"\x1b\[[0-9;]*(3[0-7]|38;|9[0-7])[0-9;]*m", drawn)  # no colour
