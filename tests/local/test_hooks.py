"""Playbook hooks: real local processes (no network), their environment, timeouts
that end the whole process group, and which hooks a run's outcome calls for."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from masking import pieces_of
from orchrun import COMMAND, PLAIN, ROOT
from rundocs import deploy_run

from orchestrator import secrets
from orchestrator.errors import CheckFailed, InputError
from orchestrator.fleet.hooks import Hooks, RunFacts, command, environment, run_hook
from orchestrator.lab.paths import pid_alive
from orchestrator.playbook import PLAYBOOK_DIR, load_playbook
from orchestrator.transaction.outcome import Outcome

REPORT = """
import json, os, sys
record = {k: v for k, v in os.environ.items() if k.startswith("ORCH_")}
record["stdin"] = sys.stdin.read()
record["argv"] = sys.argv[1:]
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(record) + "\\n")
print("reported", sys.argv[2])
sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
"""


def facts(tmp_path: Path, action: str = "deploy", **hooks: object) -> RunFacts:
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    assignments = [f"hooks.{event}={json.dumps(argv)}" for event, argv in hooks.items()]
    playbook = load_playbook(PLAYBOOK_DIR / "qwen-dflash.yaml", assignments)
    return RunFacts(action, "20261203T120000Z-abcdef", playbook, "inv.yaml", ["ct1", "ct2"], "ops")


def hook(tmp_path: Path, name: str, exit_code: int = 0) -> list[str]:
    return [
        sys.executable,
        str(tmp_path / "report.py"),
        str(tmp_path / "ran"),
        name,
        str(exit_code),
    ]


def ran(tmp_path: Path) -> list[dict]:
    path = tmp_path / "ran"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


DOCUMENT = deploy_run(
    [Outcome("ct1", "pve1", "rolled_back"), Outcome("ct2", "pve1", "skipped")],
    result="not_applied",
    log="/state/runs/x.log",
)


def test_the_environment_tells_the_runs_facts(tmp_path: Path) -> None:
    run = facts(tmp_path)
    assert environment("pre_deploy", run, None) == {
        "ORCH_HOOK": "pre_deploy",
        "ORCH_ACTION": "deploy",
        "ORCH_RUN_ID": "20261203T120000Z-abcdef",
        "ORCH_PLAYBOOK": "qwen-dflash",
        "ORCH_PLAYBOOK_FILE": str(PLAYBOOK_DIR / "qwen-dflash.yaml"),
        "ORCH_INVENTORY": "inv.yaml",
        "ORCH_CONTAINERS": "ct1,ct2",
        "ORCH_USER": "ops",
    }
    after = environment("on_failure", run, DOCUMENT)
    assert (after["ORCH_RESULT"], after["ORCH_RUN_LOG"]) == ("not_applied", "/state/runs/x.log")
    assert (after["ORCH_ROLLED_BACK"], after["ORCH_SKIPPED"], after["ORCH_DEPLOYED"]) == (
        "ct1", "ct2", ""
    )  # fmt: skip


def test_a_failing_pre_deploy_stops_the_run(tmp_path: Path) -> None:
    said: list[str] = []
    hooks = Hooks(facts(tmp_path, pre_deploy=hook(tmp_path, "pre", 3)), said.append)
    with pytest.raises(CheckFailed, match=r"exit 3 after .* the deploy did not start") as raised:
        hooks.before_deploy()
    assert raised.value.exit_code == 1
    (record,) = ran(tmp_path)
    assert record["ORCH_HOOK"] == "pre_deploy" and "ORCH_RESULT" not in record
    assert record["stdin"] == ""
    assert said[-1] == "hook pre_deploy: reported pre"


def test_a_passing_pre_deploy_lets_the_run_go_on(tmp_path: Path) -> None:
    Hooks(facts(tmp_path, pre_deploy=hook(tmp_path, "pre")), lambda _: None).before_deploy()
    assert [r["argv"][1] for r in ran(tmp_path)] == ["pre"]


@pytest.mark.parametrize(
    ("action", "changed", "code", "expected"),
    [
        ("deploy", {"result": "ok", "targets": []}, 0, ["post"]),
        ("deploy", {}, 1, ["rollback", "failure"]),
        ("deploy", {"targets": [Outcome("ct1", "pve1", "failed")]}, 3, ["failure"]),
        ("rollback", {"result": "ok", "targets": []}, 0, ["rollback"]),
    ],
)
def test_the_outcome_calls_its_hooks_and_they_never_change_it(
    tmp_path: Path, action: str, changed: dict, code: int, expected: list[str]
) -> None:
    run = facts(
        tmp_path,
        action,
        post_deploy=hook(tmp_path, "post", 1),
        on_rollback=hook(tmp_path, "rollback", 2),
        on_failure=hook(tmp_path, "failure", 0),
    )
    document = DOCUMENT.model_copy(update=changed, deep=True)
    Hooks(run, lambda _: None).after_run(document, code)
    records = ran(tmp_path)
    assert [r["argv"][1] for r in records] == expected
    assert all(json.loads(r["stdin"])["kind"] == "DeployRun" for r in records)
    assert [h.event for h in document.hooks] == [r["ORCH_HOOK"] for r in records]
    assert document.result in ("ok", "not_applied")  # as it was


def test_a_timeout_kills_the_hook_and_what_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    argv = ["/bin/sh", "-c", f'sleep 30 & echo $! > "{pid_file}"; wait']
    started = time.monotonic()
    result = run_hook("post_deploy", argv, {}, b"", 0.5)
    assert time.monotonic() - started < 10
    assert (result.exit_code, result.error) == (None, "killed at its timeout (0.5 s)")
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child)


def test_a_program_that_cannot_run_is_a_result(tmp_path: Path) -> None:
    result = run_hook("on_failure", [str(tmp_path / "missing")], {}, b"", 5)
    assert (result.exit_code, result.ok) == (None, False)
    assert result.error == "cannot run: No such file or directory"


def test_a_relative_program_is_the_playbooks_neighbour(tmp_path: Path) -> None:
    book = load_playbook(PLAYBOOK_DIR / "qwen-dflash.yaml")
    here = PLAYBOOK_DIR.resolve()
    assert command(["hooks/notify", "x"], book) == [str(here / "hooks/notify"), "x"]
    assert command(["notify-send", "x"], book) == ["notify-send", "x"]  # from PATH
    assert command(["/bin/true"], book) == ["/bin/true"]


def test_no_shell_reads_the_arguments(tmp_path: Path) -> None:
    """`$(...)` and `;` in an argument reach the hook as text."""
    marker = tmp_path / "marker"
    result = run_hook(
        "post_deploy", ["/bin/echo", f"$(touch {marker}); touch {marker}"], {}, b"", 5
    )
    assert result.ok and result.output.strip() == f"$(touch {marker}); touch {marker}"
    assert not marker.exists()


def test_hooks_are_checked_when_the_playbook_loads() -> None:
    from orchestrator.errors import InputError

    with pytest.raises(InputError, match=r"hooks\.pre_deploy: List should have at least 1 item"):
        load_playbook(PLAYBOOK_DIR / "qwen-dflash.yaml", ["hooks.pre_deploy=[]"])
    with pytest.raises(InputError, match=r"hooks\.post_deploy: Input should be a valid list"):
        load_playbook(PLAYBOOK_DIR / "qwen-dflash.yaml", ["hooks.post_deploy=notify.sh"])


@pytest.mark.parametrize(
    "program", ["missing/notify", "orch-no-such-program-anywhere", "not-executable"]
)
def test_a_hook_whose_program_is_missing_is_bad_input_before_the_run(
    tmp_path: Path, program: str
) -> None:
    """Issue 33 item 4: exit 2 naming the playbook and the field, before anything runs
    (a file that is there but not executable is missing as a program too)."""
    if program == "not-executable":
        program = str(tmp_path / "notify.sh")
        Path(program).write_text("echo hi\n")
    with pytest.raises(InputError) as refused:
        Hooks(facts(tmp_path, on_failure=[program, "x"]), lambda _: None)
    assert refused.value.exit_code == 2
    assert "hooks.on_failure: program" in str(refused.value) and "not found" in str(refused.value)
    assert "--set hooks.on_failure" in str(refused.value) or "qwen-dflash.yaml" in str(
        refused.value
    )


def test_a_hooks_stdin_holds_no_part_of_a_key(tmp_path: Path) -> None:
    key = "sk-hook-0123456789abcdef0123456789"
    secrets.register([key])
    cut = ("x" * 1990 + key)[:2000]  # a server log line cut on the container mid-key
    document = deploy_run(
        [Outcome("ct1", "pve1", "rolled_back", error=f"401: {key}; log: {cut}")],
        result="not_applied",
    )
    run = facts(tmp_path, on_rollback=hook(tmp_path, "rollback"))

    Hooks(run, lambda _: None).after_run(document, 1)

    [record] = ran(tmp_path)
    assert "ct1" in record["stdin"]
    assert not pieces_of(key, record["stdin"])


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not pid_alive(pid)


def test_a_hook_that_exits_is_judged_by_its_exit_not_by_a_child_on_its_output(
    tmp_path: Path,
) -> None:
    """Issue 35: a hook that had exited 0 leaving a process holding its output waited out
    its whole timeout and was reported killed; its group is ended at its exit."""
    pid_file = tmp_path / "child.pid"
    argv = ["/bin/sh", "-c", f'sleep 30 & echo $! > "{pid_file}"; echo done']
    started = time.monotonic()
    result = run_hook("post_deploy", argv, {}, b"", 20)
    assert time.monotonic() - started < 10
    assert (result.exit_code, result.error, result.output) == (0, None, "done\n")
    assert gone_within(int(pid_file.read_text()), 5)


def test_a_timeout_does_not_wait_on_output_held_outside_the_hooks_group(
    tmp_path: Path,
) -> None:
    """A child that left the hook's group (setsid) still holds its output: the timeout
    returns at once all the same (a 3 s timeout waited 45 s)."""
    pid_file = tmp_path / "escaped.pid"
    argv = ["/bin/sh", "-c", f'setsid sleep 30 & echo $! > "{pid_file}"; sleep 30']
    try:
        started = time.monotonic()
        result = run_hook("post_deploy", argv, {}, b"", 0.5)
        assert time.monotonic() - started < 10
        assert (result.exit_code, result.error) == (None, "killed at its timeout (0.5 s)")
    finally:
        if pid_file.exists():  # outside the group: not orch's to end, the test's own
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_hook_reads_a_document_larger_than_a_pipe_or_none_of_it(tmp_path: Path) -> None:
    """The document is a file on stdin: a hook that never reads it never blocks orch."""
    big = b"x" * (1 << 20)
    result = run_hook("post_deploy", ["/bin/sh", "-c", "exit 0"], {}, big, 10)
    assert (result.exit_code, result.error) == (0, None)
    counted = run_hook("post_deploy", ["/usr/bin/wc", "-c"], {}, big, 10)
    assert counted.output.strip() == str(len(big))


@pytest.mark.parametrize(("number", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_hook_ends_its_group_and_the_run_there(
    tmp_path: Path, number: int, code: int
) -> None:
    """Issue 35: SIGINT during a hook was "Aborted!" (exit 1), SIGTERM left the hook
    running after orch; now either ends the hook's group and orch exits 128+signal,
    saying the deploy did not start."""
    pid_file = tmp_path / "hook.pid"
    script = tmp_path / "hook.sh"
    script.write_text(f'#!/bin/sh\nsleep 60 &\necho $! > "{pid_file}"\nwait\n')
    script.chmod(0o755)
    run = subprocess.Popen(
        [
            *COMMAND, "deploy", "qwen-dflash", "-i", str(ROOT / "inventories" / "example.yaml"),
            "--set", f"hooks.pre_deploy={json.dumps([str(script)])}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**PLAIN, "XDG_CONFIG_HOME": "/nonexistent", "ORCH_STATE_DIR": str(tmp_path)},
        cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    child = int(pid_file.read_text())
    run.send_signal(number)
    stdout, stderr = run.communicate(timeout=20)
    assert run.returncode == code, stdout + stderr
    assert "hook pre_deploy" in stderr and "stopped: orch was told to stop" in stderr
    assert "Aborted!" not in stderr
    assert gone_within(child, 5)
