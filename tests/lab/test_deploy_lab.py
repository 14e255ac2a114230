"""End to end on the lab: real sshd, real pct and vLLM stand-ins, the real CLI."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from labdeploy import deploy, serving_pid, target
from labtools import FAST, LabHandle
from orchrun import ROOT
from releasetree import lab_release

from orchestrator.lab.paths import ContainerPaths, server_records

pytestmark = pytest.mark.lab

GUESSED_IDS = "drafter.overrides.dflash_config.target_layer_ids=[1,17,33,49,63]"


def test_field_story_deploy_then_guessed_ids_roll_back(lab: LabHandle) -> None:
    code, first = deploy(lab)
    assert code == 0, first
    for name in ("ct200", "ct201"):  # one reached by pct, one by direct SSH
        entry = target(first, name)
        assert entry["result"] == "deployed"
        assert entry["gate"]["verdict"] == "pass"
        assert 3.5 <= entry["gate"]["mean_acceptance_length"] <= 5
    good = target(first, "ct200")["release"]
    before = lab_release(lab, "ct200", good)
    pid_before = serving_pid(lab, "ct200")

    # Without --force the guess is stopped at preflight: nothing changes.
    code, refused = deploy(lab, "--limit", "ct200", "--set", GUESSED_IDS)
    assert code == 1
    entry = target(refused, "ct200")
    assert entry["result"] == "failed" and "preflight" in entry["error"]
    assert any(
        f["field"] == "dflash_config.target_layer_ids" and f["severity"] == "error"
        for f in entry["findings"]
    )
    assert not (lab.deployment_dir("ct200") / "releases" / entry["release"]).exists()
    assert serving_pid(lab, "ct200") == pid_before

    # With --force the gate catches it, and the previous release comes back.
    code, forced = deploy(lab, "--limit", "ct200", "--force", "--set", GUESSED_IDS)
    assert code == 1
    entry = target(forced, "ct200")
    assert entry["result"] == "rolled_back"
    assert entry["previous_release"] == good
    assert entry["gate"]["verdict"] == "fail"
    assert 1.0 <= entry["gate"]["mean_acceptance_length"] < 1.3
    assert entry["gate"]["per_position_acceptance"][0] < 0.2
    assert "target_layer_ids" in entry["gate"]["explanation"]
    assert (
        "Preflight had found: dflash_config.target_layer_ids [1, 17, 33, 49, 63]"
        in (entry["gate"]["explanation"])
    )
    assert entry["rollback_gate"]["verdict"] == "pass"
    assert lab_release(lab, "ct200", good) == before
    assert (lab.deployment_dir("ct200") / "current").readlink() == Path("releases") / good
    status = lab.orch("status", "qwen-dflash", "-i", str(lab.inventory), "--json")
    row = next(r for r in status.json["targets"] if r["name"] == "ct200")
    assert (row["release"], row["server"], row["health"]) == (good, "running", 200)
    assert row["state"] == "serving"

    audit = (lab.deployment_dir("ct200") / "audit.log").read_text().splitlines()
    assert json.loads(audit[-1])["result"] == "rolled_back"
    history = lab.orch("history", "--json")
    runs = history.json["runs"]
    assert target(runs[0], "ct200")["result"] == "rolled_back"
    assert runs[0]["run_id"] == forced["run_id"]


def test_same_inputs_twice_change_nothing(deployed_lab: LabHandle) -> None:
    pid = serving_pid(deployed_lab, "ct201")
    code, second = deploy(deployed_lab, "--limit", "ct201")
    assert code == 0
    assert target(second, "ct201")["result"] == "unchanged"
    assert serving_pid(deployed_lab, "ct201") == pid


def test_history_is_sqlite_in_the_state_dir(deployed_lab: LabHandle) -> None:
    code, first = deploy(deployed_lab, "--limit", "ct201")
    assert code == 0
    db = Path(deployed_lab.env["ORCH_STATE_DIR"]) / "history.sqlite"
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT run_id, result FROM runs").fetchall()
    assert rows == [(first["run_id"], "ok")]


def test_accept_new_host_keys_records_them(shared_lab: LabHandle, tmp_path: Path) -> None:
    known = tmp_path / "known"
    lab_known = shared_lab.lab.known_hosts
    inventory = shared_lab.inventory.read_text().replace(str(lab_known), str(known))
    (tmp_path / "inv.yaml").write_text(inventory)
    result = shared_lab.orch(
        "deploy",
        "qwen-dflash",
        "-i",
        str(tmp_path / "inv.yaml"),
        "--dry-run",
        "--accept-new-host-keys",
        "--json",
    )
    assert result.code == 0, str(result)
    assert {t["result"] for t in result.json["targets"]} == {"dry_run"}
    recorded = {line.split()[0] for line in known.read_text().splitlines()}
    expected = {line.split()[0] for line in lab_known.read_text().splitlines()}
    assert recorded == expected


@pytest.mark.parametrize(
    ("faults", "verdict_words", "source"),
    [
        ({"drop_spec_decode": True}, "speculative decoding is not active", "per_request"),
        ({"hang_while_loading": True}, "not ready after", "per_request"),
        ({"crash_after_ready_seconds": 0.0}, "did not become ready", "per_request"),
        ({"garbage_metrics": True}, "could not measure", "counters"),
    ],
)
def test_faulty_new_server_is_rolled_back(
    lab: LabHandle, faults: dict, verdict_words: str, source: str
) -> None:
    """A server not drafting answers without per-request figures: the gate falls back to
    its counters, which it has none of. Garbage on /metrics matters to counters only."""
    code, first = deploy(lab, "--limit", "ct201")
    assert code == 0
    good = target(first, "ct201")["release"]
    code, second = deploy(
        lab,
        "--limit",
        "ct201",
        "--set",
        "gate.ready_timeout=3",
        "--set",
        f"server.env.ORCH_LAB_FAULTS={json.dumps(json.dumps(faults))}",
        "--set",
        f"gate.acceptance_source={source}",
    )
    entry = target(second, "ct201")
    assert code == 1, entry["error"]
    assert entry["result"] == "rolled_back"
    assert verdict_words in entry["gate"]["reason"]
    assert entry["rollback_gate"]["verdict"] == "pass"
    assert (lab.deployment_dir("ct201") / "current").readlink() == Path("releases") / good


def test_a_server_crashing_after_its_verdict_is_rolled_back_by_the_settle(lab: LabHandle) -> None:
    """The gate decides within seconds of a ready server (its acceptance phases only
    here); the settle after it sees the crash (the stand-in's engine dies 12 s after
    ready, long after the verdict even on a loaded machine) and goes back."""
    code, first = deploy(lab, "--limit", "ct201")
    assert code == 0
    good = target(first, "ct201")["release"]
    crash = {"crash_after_ready_seconds": 12.0}
    code, second = deploy(
        lab,
        "--limit",
        "ct201",
        "--set",
        f"server.env.ORCH_LAB_FAULTS={json.dumps(json.dumps(crash))}",
        "--set",
        "gate.speed.enabled=false",
        "--set",
        "gate.settle_seconds=30",
    )
    entry = target(second, "ct201")
    assert code == 1, entry["error"]
    assert entry["result"] == "rolled_back"
    assert "after its gate passed" in entry["gate"]["reason"], entry["gate"]["reason"]
    assert "settle" in entry["steps"]
    assert entry["rollback_gate"]["verdict"] == "pass"
    assert (lab.deployment_dir("ct201") / "current").readlink() == Path("releases") / good


def phase_outcomes(gate: dict) -> list[tuple[str, str, str]]:
    return [(p["context"], p["endpoint"], p["verdict"]) for p in gate["by_context"]]


def short_passes_long_fails(gate: dict) -> None:
    """Every phase ran at once: the short ones did not fail, a long one failed and stopped
    the rest."""
    outcomes = phase_outcomes(gate)
    assert [o[:2] for o in outcomes] == [
        ("short", "/v1/completions"),
        ("short", "/v1/chat/completions"),
        ("long", "/v1/completions"),
        ("long", "/v1/chat/completions"),
    ]
    assert "fail" not in [o[2] for o in outcomes[:2]], outcomes
    assert "fail" in [o[2] for o in outcomes[2:]], outcomes
    assert gate["reason"].startswith("long context (2048..32768 tokens) via /v1/")


def test_sliding_layers_run_as_full_attention_fail_the_long_bucket(lab: LabHandle) -> None:
    # A new server that runs the sliding layers as full attention is rolled back.
    code, first = deploy(lab, "--limit", "ct201")
    assert code == 0
    good = target(first, "ct201")["release"]
    assert target(first, "ct201")["gate"]["advice"]["num_speculative_tokens"] == 15
    fault = json.dumps(json.dumps({"swa_as_full_attention": True}))
    code, second = deploy(lab, "--limit", "ct201", "--set", f"server.env.ORCH_LAB_FAULTS={fault}")
    entry = target(second, "ct201")
    assert code == 1, entry["error"]
    assert entry["result"] == "rolled_back"
    gate = entry["gate"]
    short_passes_long_fails(gate)
    assert gate["by_context"][1]["chat_template_kwargs"] == {"enable_thinking": False}
    assert "2048-token sliding window" in gate["explanation"]
    assert "full attention" in gate["explanation"]
    assert entry["rollback_gate"]["verdict"] == "pass"
    assert (lab.deployment_dir("ct201") / "current").readlink() == Path("releases") / good

    # The container's faults file makes every server on it do so: a first deploy fails
    # on long contexts and its server is stopped.
    container = ContainerPaths(lab.deployment_dir("ct200").parents[4])
    container.faults.write_text(json.dumps({"swa_as_full_attention": True}))
    code, third = deploy(lab, "--limit", "ct200")
    entry = target(third, "ct200")
    assert code == 1, entry["error"]
    assert entry["result"] == "failed"
    short_passes_long_fails(entry["gate"])
    assert "2048-token sliding window" in entry["gate"]["explanation"]
    assert server_records(container) == []
    # Nothing broken: ct200 is as before its first deploy, and status says so with exit 0.
    assert not (lab.deployment_dir("ct200") / "current").is_symlink()
    status = lab.orch("status", "qwen-dflash", "-i", str(lab.inventory), "-l", "ct200", "--json")
    assert status.code == 0, str(status)
    (ct200,) = status.json["targets"]
    assert (ct200["state"], ct200["release"]) == ("nothing_deployed", None)
    assert (ct200["last_run"]["result"], ct200["last_run"]["release"]) == (
        "failed",
        entry["release"],
    )


def test_server_ignoring_sigterm_is_killed_by_pid(lab: LabHandle) -> None:
    stubborn = json.dumps(json.dumps({"ignore_sigterm": True}))
    code, _ = deploy(
        lab,
        "--limit",
        "ct200",
        "--set",
        "server.stop_timeout=1",
        "--set",
        f"server.env.ORCH_LAB_FAULTS={stubborn}",
    )
    assert code == 0
    old_pid = serving_pid(lab, "ct200")
    code, second = deploy(lab, "--limit", "ct200", "--set", "server.stop_timeout=1")
    assert code == 0, target(second, "ct200")["error"]
    assert target(second, "ct200")["result"] == "deployed"
    container = ContainerPaths(lab.deployment_dir("ct200").parents[4])
    assert [r["pid"] for r in server_records(container)] == [serving_pid(lab, "ct200")]
    assert serving_pid(lab, "ct200") != old_pid


def test_held_lock_is_refused_with_its_owner(lab: LabHandle) -> None:
    lock = lab.deployment_dir("ct200") / "lock"
    lock.mkdir(parents=True)
    (lock / "owner.json").write_text('{"user": "alice", "run_id": "r1"}')
    code, document = deploy(lab, "--limit", "ct200")
    assert code == 3
    assert "alice" in target(document, "ct200")["error"]
    assert not (lab.deployment_dir("ct200") / "releases").exists()
    unlock = ("unlock", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct200")
    refused = lab.orch(*unlock)  # its heartbeat is fresh: alice's run may be at work
    assert refused.code == 3 and "alice" in refused.stdout and "--force" in refused.stdout
    assert lock.exists()
    silent = time.time() - 3600  # silent beyond the default lease: alice's run is gone
    os.utime(lock / "owner.json", (silent, silent))
    removed = lab.orch(*unlock)
    assert removed.code == 0 and "alice" in removed.stdout
    assert not lock.exists()


def test_unknown_host_key_is_refused_before_any_command(lab: LabHandle, tmp_path: Path) -> None:
    inventory = lab.inventory.read_text().replace(
        str(lab.lab.known_hosts), str(tmp_path / "empty_known_hosts")
    )
    (tmp_path / "inv.yaml").write_text(inventory)
    result = lab.orch("deploy", "qwen-dflash", "-i", str(tmp_path / "inv.yaml"), "--json")
    assert result.code == 3
    canary, rest = result.json["targets"]
    assert canary["error"].startswith("pve1: connect: unknown host key ssh-ed25519 SHA256:")
    assert "--accept-new-host-keys" in canary["error"]
    assert rest["result"] == "skipped"
    assert not lab.deployment_dir("ct200").exists()
    log = (lab.lab.root / "hosts/pve1/sshd/sshd.log").read_text()
    assert "Accepted publickey" not in log


def test_hostile_values_are_quoted_or_refused(lab: LabHandle, tmp_path: Path) -> None:
    marker = tmp_path / "INJECTED"
    hostile = f"we ird;$(touch {marker})`touch {marker}`'q\"x"
    inventory = yaml.safe_load(lab.inventory.read_text())
    state_dir = inventory["containers"]["ct200"]["vars"]["state_dir"]
    inventory["containers"]["ct200"]["vars"]["state_dir"] = f"{state_dir}/{hostile}"
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inventory))
    result = lab.orch(
        "deploy",
        "qwen-dflash",
        "-i",
        str(tmp_path / "inv.yaml"),
        "--limit",
        "ct200",
        "--json",
        *FAST,
        "--set",
        f"target.served_name=q';touch {marker};'",
        "--set",
        f"server.env.HOSTILE=$(touch {marker})",
    )
    entry = target(result.json, "ct200")
    assert result.code == 0, entry["error"]
    assert entry["result"] == "deployed"
    assert (Path(state_dir) / hostile / "qwen-dflash" / "current").is_symlink()
    assert not marker.exists()

    inventory["containers"]["ct200"]["vars"]["state_dir"] = f"{state_dir}/a\nb"
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inventory))
    refused = lab.orch("deploy", "qwen-dflash", "-i", str(tmp_path / "inv.yaml"), "--json")
    assert refused.code == 2
    assert "containers.ct200.vars.state_dir: " in refused.stderr  # the schema's, with its line
    assert "contains a line break" in refused.stderr
    assert not marker.exists()


def test_rollback_command_switches_to_the_previous_release(lab: LabHandle) -> None:
    code, first = deploy(lab, "--limit", "ct201")
    assert code == 0
    code, second = deploy(lab, "--limit", "ct201", "--set", "server.max_model_len=8192")
    assert code == 0
    old, new = target(first, "ct201")["release"], target(second, "ct201")["release"]
    assert target(second, "ct201")["previous_release"] == old

    back = lab.orch(
        "rollback", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct201", "--json", *FAST
    )
    entry = target(back.json, "ct201")
    assert back.code == 0, entry["error"]
    assert (entry["result"], entry["release"], entry["previous_release"]) == (
        "rolled_back",
        old,
        new,
    )
    assert entry["gate"]["verdict"] == "pass"
    deployment = lab.deployment_dir("ct201")
    assert (deployment / "current").readlink() == Path("releases") / old
    assert (deployment / "previous").readlink() == Path("releases") / new

    unknown = lab.orch(
        "rollback",
        "qwen-dflash",
        "-i",
        str(lab.inventory),
        "--limit",
        "ct201",
        "--to",
        "0123456789ab",
        "--json",
    )
    assert unknown.code == 2  # resolved before anything is switched (tests/test_releases_lab.py)
    assert "--to 0123456789ab: no run or release has this id" in unknown.stderr


def test_failed_first_deploy_stops_its_server(lab: LabHandle) -> None:
    code, document = deploy(lab, "--limit", "ct200", "--force", "--set", GUESSED_IDS)
    entry = target(document, "ct200")
    assert code == 1
    assert (entry["result"], entry["previous_release"]) == ("failed", None)
    assert entry["gate"]["verdict"] == "fail"
    assert not (lab.deployment_dir("ct200") / "server.pid").exists()
    container = ContainerPaths(lab.deployment_dir("ct200").parents[4])
    assert server_records(container) == []
    status = lab.orch(
        "status", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct200", "--json"
    )
    # nothing broken: ct200 is as before its first deploy (issue 20: not exit 3)
    assert status.code == 0, str(status)
    [row] = status.json["targets"]
    assert (row["server"], row["health"], row["last_run"]["result"]) == ("none", None, "failed")
    assert (row["state"], row["release"]) == ("nothing_deployed", None)


def test_old_releases_beyond_the_kept_count_are_pruned(lab: LabHandle) -> None:
    releases = []
    for max_model_len in (4096, 8192, 16384):
        code, document = deploy(
            lab,
            "--limit",
            "ct201",
            "--set",
            "releases_kept=2",
            "--set",
            f"server.max_model_len={max_model_len}",
        )
        assert code == 0, target(document, "ct201")["error"]
        releases.append(target(document, "ct201")["release"])
    deployment = lab.deployment_dir("ct201")
    assert sorted(p.name for p in (deployment / "releases").iterdir()) == sorted(releases[1:])
    assert (deployment / "current").readlink() == Path("releases") / releases[2]
    assert (deployment / "previous").readlink() == Path("releases") / releases[1]


def test_rollback_regates_the_previous_release_with_its_own_served_name(lab: LabHandle) -> None:
    code, first = deploy(lab, "--limit", "ct201")
    assert code == 0
    good = target(first, "ct201")["release"]
    broken = json.dumps(json.dumps({"drop_spec_decode": True}))
    code, second = deploy(
        lab,
        "--limit",
        "ct201",
        "--set",
        "target.served_name=renamed",
        "--set",
        f"server.env.ORCH_LAB_FAULTS={broken}",
    )
    entry = target(second, "ct201")
    assert (code, entry["result"]) == (1, "rolled_back"), entry["error"]
    assert entry["rollback_gate"]["verdict"] == "pass"  # asked for its own name, not "renamed"
    assert (lab.deployment_dir("ct201") / "current").readlink() == Path("releases") / good
    manifest = json.loads(
        (lab.deployment_dir("ct201") / "releases" / good / "manifest.json").read_text()
    )
    assert manifest["gate_target"]["served_name"] == "qwen3.6-27b"


def test_after_ctrl_c_the_containers_not_started_say_the_run_was_interrupted(
    lab: LabHandle,
) -> None:
    """SIGINT during the canary: the next wave is skipped because of the interrupt, and
    says so, not that a failure budget was spent."""
    slow = json.dumps(json.dumps({"load_seconds": 6}))
    args = ["deploy", "qwen-dflash", "-i", str(lab.inventory), *FAST]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator",
            *args,
            "--set",
            f"server.env.ORCH_LAB_FAULTS={slow}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=lab.env,
        cwd=ROOT,
    )
    assert process.stderr
    for line in process.stderr:  # progress: one line per step off a terminal
        if line.rstrip().endswith("ct200: wait ready"):
            process.send_signal(signal.SIGINT)
            break
    out, _ = process.communicate(timeout=120)

    assert process.returncode == 130, out
    rows: dict[str, str] = {}
    for line in out.splitlines():  # the table's rows come first
        if line.startswith("ct2"):
            rows.setdefault(line.split()[0], line.split()[1])
    assert (rows["ct200"], rows["ct201"]) == ("interrupted", "skipped")
    assert "ct201: not started: the run was interrupted" in out
    assert "failure budget" not in out


def test_a_deploy_records_its_speed_at_each_level(lab: LabHandle) -> None:
    """No reference yet: the speed levels are measured and recorded, and block nothing."""
    code, document = deploy(lab, "--limit", "ct200")
    assert code == 0, document
    gate = target(document, "ct200")["gate"]
    assert gate["verdict"] == "pass"
    speed = gate["speed"]
    assert (speed["verdict"], speed["reference"]) == ("not_judged", None)
    assert speed["streamed"] is True  # the stand-in streams as vLLM does: no whole-request timing
    assert speed["note"] is None
    assert [level["concurrency"] for level in speed["levels"]] == [1, 8]
    for level in speed["levels"]:
        assert level["time_to_first_token"] is not None
        assert level["requests"] >= 2 * level["concurrency"]
        for figure in ("per_stream_tokens_per_second", "total_tokens_per_second"):
            measured = level[figure]
            assert 0 < measured["lower"] <= measured["mean"] <= measured["upper"]
        assert level["speedup"] is None
        assert level["verdict"] == "not_judged"
        assert level["batch_measured"] > 0 and 0 <= level["foreign_share"] <= 1
    assert speed["output_tokens"] >= sum(lv["output_tokens"] for lv in speed["levels"]) > 0
    status = lab.orch("status", "qwen-dflash", "-i", str(lab.inventory), "-l", "ct200", "--json")
    recorded = status.json["targets"][0]["release_gate"]["speed"]
    assert [level["concurrency"] for level in recorded["levels"]] == [1, 8]
    assert (
        recorded["levels"][1]["total_tokens_per_second"]
        == speed["levels"][1]["total_tokens_per_second"]
    )
