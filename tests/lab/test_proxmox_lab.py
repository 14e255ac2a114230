"""Proxmox VE as its source says, on the lab (docs/field-notes/proxmox.md):
a container with a pending GPU change is discovered as it runs, a DHCP container with
its live address, a template is left out and named by doctor, a wrong vmid is named by
deploy, status and doctor although pct exits 2, and a login that is not root is told
that pct needs root. One standalone node (no cluster entry) with three containers."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from labtools import FAST, LOAD_SECONDS, LabHandle, cli_env, free_network

from orchestrator.lab import pveconf
from orchestrator.lab.cluster import Lab, LabSpec

pytestmark = pytest.mark.lab


def edit_conf(path: Path, change: str, current: dict[str, str] | None = None) -> None:
    """Edit a lab container's /etc/pve/lxc/VMID.conf as Proxmox would have written it."""
    conf = pveconf.parse(path.read_text())
    conf.current.options.update(current or {})
    if change:
        key, _, value = change.partition(": ")
        conf.pending.options[key] = value
    path.write_text(pveconf.file_text(conf))


@pytest.fixture(scope="module")
def proxmox_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    """ct200 with a dev1 change pending (a devN that exists is not hot-plugged: it waits
    for the next start), ct201 on DHCP, ct202 a (stopped) template."""
    root = tmp_path_factory.mktemp("proxmox")
    spec = LabSpec(containers_per_host=3, load_seconds=LOAD_SECONDS, network=free_network(),
                   direct_ssh=False, standalone=True)  # fmt: skip
    lab = Lab(root / "lab")
    lab.up(spec)
    try:
        host = lab.paths.host("pve1")
        edit_conf(host.container(200).config, "dev1: /dev/nvidia9,mode=0666")
        dhcp = pveconf.parse(host.container(201).config.read_text()).current.options["net0"]
        edit_conf(host.container(201).config, "", {"net0": dhcp.split(",ip=")[0] + ",ip=dhcp"})
        subprocess.run([host.pct, "stop", "202"], check=True)
        edit_conf(host.container(202).config, "", {"template": "1"})
        yield LabHandle(lab, cli_env(root / "state"))
    finally:
        lab.down()


def discover(handle: LabHandle, *extra: str) -> tuple[int, str, str]:
    node = handle.lab.nodes()[0]
    done = handle.orch(
        "inventory", "discover", "--address", node.address, "--port", str(node.port),
        "--identity-file", str(handle.lab.key), "--known-hosts", str(handle.lab.known_hosts),
        *extra,
    )  # fmt: skip
    return done.code, done.stdout, done.stderr


def test_discovered_as_it_runs_with_live_dhcp_address_and_templates_left_out(
    proxmox_lab: LabHandle,
) -> None:
    pct = proxmox_lab.lab.paths.host("pve1").pct
    merged = subprocess.run([pct, "config", "200"], capture_output=True, text=True, check=True)
    assert "dev1: /dev/nvidia9,mode=0666" in merged.stdout  # the next start's, not what runs

    code, out, err = discover(proxmox_lab, "--json")
    assert code == 0, err
    document = yaml.safe_load(out)
    assert document["node"] == "pve1"  # a standalone node answers with nodeid 0, no cluster
    found = {t["name"]: t for t in document["targets"]}
    assert list(found) == ["ct200", "ct201"]
    assert found["ct200"]["gpus"] == [0, 1]
    lab_addresses = {c.name: c.address for c in proxmox_lab.lab.containers()}
    assert found["ct201"]["address"] == lab_addresses["ct201"]  # from .../201/interfaces
    text = document["inventory"]
    assert "# CT 202 is a template, left out: Proxmox does not start templates" in text
    assert f"# ct201: net0 has ip=dhcp; {lab_addresses['ct201']} is its live address" in text
    assert "ct202:" not in text


def test_doctor_names_a_template_and_why_it_cannot_be_started(proxmox_lab: LabHandle) -> None:
    done = proxmox_lab.orch("doctor", "-i", str(proxmox_lab.inventory), "--limit", "ct202")
    pct = proxmox_lab.lab.paths.host("pve1").pct
    assert done.code == 3
    assert (
        "ct202  container      FAIL  CT 202 on pve1 is a template: Proxmox does not start "
        "templates\n" in done.stdout
    )
    assert f"fix: clone it ({pct} clone 202 NEWID --full)" in done.stdout
    assert "start it" not in done.stdout


def test_a_wrong_vmid_is_named_by_deploy_status_and_doctor(
    proxmox_lab: LabHandle, tmp_path: Path
) -> None:
    node = proxmox_lab.lab.nodes()[0]
    ssh = ["ssh", "-p", str(node.port), "-i", str(proxmox_lab.lab.key), "-o", "BatchMode=yes",
           "-o", f"UserKnownHostsFile={proxmox_lab.lab.known_hosts}", node.address]  # fmt: skip
    pct = proxmox_lab.lab.paths.host("pve1").pct
    direct = subprocess.run([*ssh, f"{pct} exec 999 -- true"], capture_output=True, text=True)
    assert direct.returncode == 2, direct.stderr  # as the real pct: errno ENOENT

    data = yaml.safe_load(proxmox_lab.inventory.read_text())
    data["containers"]["ct200"]["vmid"] = 999
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump(data))
    args = ["-i", str(wrong), "--limit", "ct200"]
    said = "no container 999 on pve1 (pct: Configuration file 'nodes/pve1/lxc/999.conf'"
    fix = "check the inventory's vmid: pct list on pve1 shows its containers"
    for command in (["deploy", "qwen-dflash", *FAST], ["status", "qwen-dflash"], ["doctor"]):
        done = proxmox_lab.orch(*command, *args)
        assert done.code == 3, done.stdout + done.stderr
        assert said in done.stdout + done.stderr and fix in done.stdout + done.stderr, command


def test_a_login_that_is_not_root_is_told_pct_needs_root(proxmox_lab: LabHandle) -> None:
    root_uid = proxmox_lab.lab.paths.host("pve1").root_uid
    before = root_uid.read_text()
    root_uid.write_text(f"{os.geteuid() + 1}\n")  # the login is now not the host's root
    try:
        doctor = proxmox_lab.orch("doctor", "-i", str(proxmox_lab.inventory), "--limit", "ct200")
        code, _, err = discover(proxmox_lab)
    finally:
        root_uid.write_text(before)
    assert doctor.code == 3
    assert "ct200  container      FAIL  pct on pve1 needs root (pct: please run as root)\n" in (
        doctor.stdout
    )
    assert "fix: log in to pve1 as root, or set become: sudo for it in the inventory" in (
        doctor.stdout
    )
    assert code == 3 and "pvesh and pct need root (pvesh: please run as root)" in err
    assert "--become sudo" in err
