"""The status report: the script under /bin/sh and its parser on captured text."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from shelltools import (
    Processes,
    captured,
    run,
    start_time,
    wait_until,
)

from orchestrator.container.audit import audit_line
from orchestrator.container.status import parse_status_report, status_report
from orchestrator.layout import Layout


def test_status_report_parses_into_a_status_row(
    deployment: Path, processes: Processes, tmp_path: Path
) -> None:
    server = processes.spawn("sleep", "60")
    wait_until(lambda: start_time(server.pid) is not None)
    (deployment / "current").symlink_to("releases/0123456789ab")
    (deployment / "server.pid").write_text(f"{server.pid} {start_time(server.pid)}\n")
    (deployment / "lock").mkdir()
    (deployment / "lock" / "owner.json").write_text('{"run_id": "r1", "user": "ops"}')
    a, b = "0123456789ab", "ba9876543210"
    passed = {"verdict": "pass", "mean_acceptance_length": 4.21}
    regated = {"verdict": "pass", "mean_acceptance_length": 4.18}
    failed = {"verdict": "fail", "mean_acceptance_length": 1.11}
    lines = [
        audit_line("r0", "ops", "deploy", {"result": "failed"}),
        audit_line("r1", "ops", "deploy", {"result": "deployed", "release": a, "current": a,
                                           "gate": passed}),
        audit_line("r2", "ops", "deploy", {"result": "rolled_back", "release": b, "current": a,
                                           "previous_release": a, "gate": failed,
                                           "rollback_gate": regated}),
    ]  # fmt: skip
    (deployment / "audit.log").write_text("".join(f"{line}\n" for line in lines))

    done = run(status_report(Layout(str(deployment))))

    parsed = asdict(parse_status_report(done.stdout.decode()))
    assert parsed == {
        "release": a,
        "release_missing": True,  # `current` names a dir that is not there
        "server": "running",
        "pid": server.pid,
        "release_gate": {  # the re-gate that kept `a`, not r2's failed gate of `b`
            "run_id": "r2",
            "time": parsed["release_gate"]["time"],
            "result": "pass",
            "mean_acceptance_length": 4.18,
            "speed": None,  # a gate without speed levels (recorded before they were)
        },
        "last_run": {
            "run_id": "r2",
            "time": parsed["last_run"]["time"],
            "action": "deploy",
            "result": "rolled_back",
            "release": b,
            "current": a,
            "verdict": "fail",
            "mean_acceptance_length": 1.11,
            "speed": None,
        },
        "lock": '{"run_id": "r1", "user": "ops"}',
        "log_end": None,
    }
    (deployment / "releases" / a).mkdir(parents=True)
    there = run(status_report(Layout(str(deployment))))
    assert parse_status_report(there.stdout.decode()).release_missing is False
    (deployment / "current").unlink()  # a run killed after its switch: `b` never gated
    (deployment / "current").symlink_to(f"releases/{b}")
    killed = parse_status_report(run(status_report(Layout(str(deployment)))).stdout.decode())
    assert (killed.release, killed.release_gate) == (b, None)
    empty = run(status_report(Layout(str(tmp_path / "never deployed"))))
    assert asdict(parse_status_report(empty.stdout.decode())) == {
        "release": None,
        "release_missing": False,
        "server": "none",
        "pid": None,
        "release_gate": None,
        "last_run": None,
        "lock": None,
        "log_end": None,
    }


def test_status_report_as_a_row() -> None:
    assert asdict(parse_status_report(captured("status-report.txt"))) == {
        "release": "0123456789ab",
        "release_missing": False,
        "server": "running",
        "pid": 31337,
        "release_gate": {  # a line written before `current_gate` was recorded
            "run_id": "20250101T110000-cd34",
            "time": "2025-01-01T11:05:00+00:00",
            "result": "pass",
            "mean_acceptance_length": 4.12,
            "speed": None,
        },
        "last_run": {
            "run_id": "20250101T110000-cd34",
            "time": "2025-01-01T11:05:00+00:00",
            "action": "deploy",
            "result": "deployed",
            "release": "0123456789ab",
            "current": "0123456789ab",
            "verdict": "pass",
            "mean_acceptance_length": 4.12,
            "speed": None,
        },
        "lock": '{"run_id": "20250101T120000-ab12", "user": "ops", "control_host": "laptop"}',
        "log_end": None,
    }


def test_status_report_of_a_container_never_deployed() -> None:
    assert asdict(parse_status_report(captured("status-report-empty.txt"))) == {
        "release": None,
        "release_missing": False,
        "server": "none",
        "pid": None,
        "release_gate": None,
        "last_run": None,
        "lock": None,
        "log_end": None,
    }


def test_a_recorded_server_whose_process_is_gone_gives_its_logs_last_line(
    deployment: Path, processes: Processes
) -> None:
    """Only the last line, as text: a carriage return, a form feed or a backslash escape
    in it starts no line, and so no key, of its own."""
    server = processes.spawn("true")
    server.wait()
    (deployment / "current").symlink_to("releases/0123456789ab")
    (deployment / "server.pid").write_text(f"{server.pid} 1\n")
    last = 'loading 50%\rKilled\x0caudit {"action": "stop"} \\naudit {"action": "stop"}'
    (deployment / "server.log").write_text("INFO starting\n" + last + "\n")

    report = parse_status_report(run(status_report(Layout(str(deployment)))).stdout.decode())

    assert (report.server, report.pid, report.log_end) == ("stopped", server.pid, last)
    assert report.last_run is None
