"""`orch doctor`: its commands, parsers and output, and on the lab: a stopped container
is named with its fix and exit 3; a ready lab exits 0."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from labtools import LabHandle

from orchestrator.connections import Connections
from orchestrator.documents.fleet import Check
from orchestrator.documents.fleet import Doctor as DoctorDocument
from orchestrator.fleet.doctor import Doctor, exit_code
from orchestrator.inventory import Inventory
from orchestrator.playbook import find_playbook
from orchestrator.report.tables import print_doctor
from orchestrator.transport.memory import MemoryTransport, reply
from orchestrator.transport.pct import PctTransport


def test_one_line_per_check_with_the_fix_under_failures(capsys: pytest.CaptureFixture) -> None:
    checks = [
        Check("pve1", "login", "ok", "root@192.0.2.1, host key verified"),
        Check("ct200", "container", "fail", "CT 200 on pve1 is stopped", "pct start 200"),
        Check("ct200", "sshd sessions", "info", "unknown"),
    ]
    print_doctor(DoctorDocument.of(checks))
    assert capsys.readouterr().out == (
        "pve1   login          ok    root@192.0.2.1, host key verified\n"
        "ct200  container      FAIL  CT 200 on pve1 is stopped\n"
        "                            fix: pct start 200\n"
        "ct200  sshd sessions  info  unknown\n"
        "1 check(s) failed\n"
    )
    assert exit_code(checks) == 3 and exit_code([checks[0], checks[2]]) == 0


def container_check(status: str, config: str = "hostname: ct200\n") -> Check:
    """Doctor's container check on a host whose pct answers as scripted."""
    host = MemoryTransport("pve1")
    host.on("container_status", reply(f"status: {status}\n"))
    host.on("guest_config", reply(config))
    inventory = Inventory.model_validate(
        {"hosts": {"pve1": {"address": "192.0.2.1"}},
         "containers": {"ct200": {"vmid": 200, "host": "pve1", "address": "192.0.2.10"}}}
    )  # fmt: skip
    doctor = Doctor(inventory, Connections(inventory))
    return doctor._pct_status("ct200", PctTransport("ct200", host, "/usr/sbin/pct", 200))


def test_only_a_stopped_container_is_told_to_start_and_a_template_is_named() -> None:
    assert container_check("running").status == "ok"
    stopped = container_check("stopped")
    assert (stopped.detail, stopped.fix) == (
        "CT 200 on pve1 is stopped", "start it on pve1 with: /usr/sbin/pct start 200",
    )  # fmt: skip
    unknown = container_check("unknown")
    assert unknown.detail == "CT 200 on pve1 is unknown" and "start it" not in unknown.fix
    assert unknown.fix == "find out why on pve1: /usr/sbin/pct status 200 --verbose"
    template = container_check("stopped", "hostname: ct200\ntemplate: 1\n")
    assert template.detail == "CT 200 on pve1 is a template: Proxmox does not start templates"
    assert template.fix.startswith("clone it (/usr/sbin/pct clone 200 NEWID --full)")


@pytest.mark.lab
def test_doctor_names_the_stopped_container_and_exits_3(shared_lab: LabHandle) -> None:
    ready = shared_lab.orch("doctor", "qwen-dflash", "-i", str(shared_lab.inventory), "--json")
    assert ready.code == 0, str(ready)
    targets = ready.json["targets"]
    assert ready.json["result"] == "ok" and {t["result"] for t in targets} == {"ok"}
    checks = [{**c, "target": t["name"]} for t in targets for c in t["checks"]]
    assert not [c for c in checks if c["status"] == "fail"]
    names = {(c["target"], c["check"]) for c in checks}
    for name in ("ct200", "ct201"):
        assert {(name, "nvidia-smi"), (name, "server"), (name, "models"), (name, "disk")} <= names
    assert ("pve1", "login") in names and ("ct201", "login") in names

    pct = shared_lab.lab.paths.host("pve1").pct
    subprocess.run([pct, "stop", "200"], check=True)
    try:
        stopped = shared_lab.orch("doctor", "qwen-dflash", "-i", str(shared_lab.inventory))
    finally:
        subprocess.run([pct, "start", "200"], check=True)  # as the shared lab was
    assert stopped.code == 3
    assert "ct200  container      FAIL  CT 200 on pve1 is stopped\n" in stopped.stdout
    assert f"fix: start it on pve1 with: {pct} start 200\n" in stopped.stdout
    assert "ct201  server         ok" in stopped.stdout
    assert stopped.stdout.endswith("1 check(s) failed\n")


@pytest.mark.lab
def test_a_gpu_held_by_another_playbooks_server_is_named_with_the_command_that_frees_it(
    deployed_lab: LabHandle, tmp_path: Path
) -> None:
    """qwen-dflash serves on ct201; a second playbook there finds its GPUs short: doctor
    names the process nvidia-smi reports, that it is qwen-dflash's server, and the stop
    with the inventory given."""
    lab = deployed_lab
    other = tmp_path / "other.yaml"
    shipped = find_playbook("qwen-dflash").read_text()
    other.write_text(shipped.replace("name: qwen-dflash", "name: other").replace("8000", "8001"))
    serving = int((lab.deployment_dir("ct201") / "server.pid").read_text().split()[0])

    found = lab.orch("doctor", str(other), "-i", str(lab.inventory), "-l", "ct201")

    assert found.code == 3, found.stdout + found.stderr
    lines = found.stdout.splitlines()
    (row,) = [line for line in lines if line.startswith("ct201  gpu[0].memory  FAIL  ")]
    assert re.search(
        rf"used by PID {serving} \(\S+, \d+ MiB\): held by qwen-dflash's server \(pid {serving}\), "
        rf"another orch playbook on this container: `orch stop qwen-dflash -i {lab.inventory} "
        "--limit ct201` frees it",
        row,
    )
