"""The lab's pct and pvesh against Proxmox VE's own source (docs/field-notes/proxmox.md):
the configuration file with `[pve:pending]`, `pct config --current`, pct's exit statuses,
templates, the interfaces endpoint, a standalone node, root only.
Real processes of the stand-ins on a host directory; no sshd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lab import pveconf
from orchestrator.lab.cluster import conf_text
from orchestrator.lab.paths import (
    HostPaths,
    LabPaths,
    write_host_launchers,
    write_json_atomic,
    write_pct_launcher,
)

pytestmark = pytest.mark.lab  # real processes (the stand-ins), though no sshd

# What Proxmox writes after `pct set 200 --dev1 /dev/nvidia5 --delete dev2` on a running
# container: a devN that exists is not hot-plugged (Config.pm vmconfig_hotplug_pending),
# so both changes wait in [pve:pending] for the next start.
PENDING_CONF = """\
#GPU box%3A two A6000
arch: amd64
dev0: /dev/nvidia0,mode=0666
dev1: /dev/nvidia1,mode=0666
dev2: /dev/nvidiactl,mode=0666
hostname: ct200
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:00,ip=dhcp,type=veth
lxc.cgroup2.devices.allow: c 195:* rwm

[pve:pending]
delete: dev2
dev1: /dev/nvidia5,mode=0666
memory: 4096

[before-upgrade]
arch: amd64
hostname: old
"""


def lab_host(root: Path, standalone: bool = False) -> HostPaths:
    """Host pve1 with containers 200 (running) and 201 (stopped), recorded in lab.json."""
    host = LabPaths(root).host("pve1")
    for vmid, status in ((200, "running"), (201, "stopped")):
        container = host.container(vmid)
        write_json_atomic(container.state, {"name": f"ct{vmid}", "vmid": vmid, "status": status})
        container.config.write_text(conf_text(f"ct{vmid}", f"127.9.1.{vmid - 190}", [0], True))
        container.rootfs.mkdir(parents=True, exist_ok=True)
    write_pct_launcher(host, sys.executable)
    write_host_launchers(host, sys.executable)
    write_json_atomic(
        root / "lab.json",
        {
            "spec": {"standalone": standalone},
            "nodes": [{"name": "pve1", "address": "127.9.1.1"}],
            "containers": [
                {"name": f"ct{v}", "vmid": v, "host": "pve1", "address": f"127.9.1.{v - 190}"}
                for v in (200, 201)
            ],
        },
    )
    return host


@pytest.fixture
def host(tmp_path: Path) -> HostPaths:
    return lab_host(tmp_path / "lab")


def run(tool: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=30)


def pvesh_json(host: HostPaths, path: str, *options: str) -> Any:
    done = run(host.pvesh, "get", path, *options, "--output-format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# --- the configuration file (pure) -------------------------------------------------------


def test_conf_file_round_trips_and_merges_pending_unless_current() -> None:
    conf = pveconf.parse(PENDING_CONF)
    assert pveconf.file_text(conf) == PENDING_CONF
    assert conf.current.options["description"] == "GPU box: two A6000\n"
    assert list(conf.snapshots) == ["before-upgrade"]
    running = pveconf.effective(conf, current=True)
    assert (running.options["dev1"], running.options.get("memory")) == (
        "/dev/nvidia1,mode=0666", None,
    )  # fmt: skip
    assert "dev2" in running.options
    next_boot = pveconf.effective(conf, current=False)
    assert next_boot.options["dev1"] == "/dev/nvidia5,mode=0666"
    assert next_boot.options["memory"] == "4096" and "dev2" not in next_boot.options
    printed = pveconf.pct_config_text(next_boot)
    assert printed.splitlines()[0] == "arch: amd64"
    assert "description: GPU box%3A two A6000%0A" in printed
    assert printed.endswith("lxc.cgroup2.devices.allow: c 195:* rwm\n")  # raw lines last


@pytest.mark.parametrize("spelling", ["dev2 memory", "dev2,memory", "!dev2;memory"])
def test_pending_deletions_are_split_as_proxmox_splits_them(spelling: str) -> None:
    assert pveconf.pending_deletions(spelling) == ["dev2", "memory"]


# --- pct -----------------------------------------------------------------------------------


def test_pct_config_prints_pending_changes_merged_in_and_the_running_one_with_current(
    host: HostPaths,
) -> None:
    host.container(200).config.write_text(PENDING_CONF)
    merged = run(host.pct, "config", "200")
    assert "dev1: /dev/nvidia5,mode=0666\n" in merged.stdout and "dev2:" not in merged.stdout
    for flag in (["--current"], ["--current", "1"], ["--current=yes"]):
        running = run(host.pct, "config", "200", *flag)
        assert running.returncode == 0, running.stderr
        assert "dev1: /dev/nvidia1,mode=0666\n" in running.stdout and "memory" not in running.stdout
    assert run(host.pct, "config", "200", "--current", "0").stdout == merged.stdout
    refused = run(host.pct, "config", "200", "--current=maybe")
    assert refused.returncode == 255 and "type check ('boolean') failed" in refused.stderr


def test_pct_start_makes_the_pending_changes_current(host: HostPaths) -> None:
    """vm_start applies what is pending (pve-container 6.1.10 `src/PVE/LXC.pm:3128-3134`)."""
    host.container(201).config.write_text(PENDING_CONF.replace("ct200", "ct201"))
    pending = run(host.pct, "config", "201").stdout
    assert run(host.pct, "start", "201").returncode == 0
    assert run(host.pct, "config", "201", "--current").stdout == pending
    written = host.container(201).config.read_text()
    assert "[pve:pending]" not in written and "[before-upgrade]" in written


def test_pct_exits_with_errno_2_for_a_vmid_without_configuration(host: HostPaths) -> None:
    message = "Configuration file 'nodes/pve1/lxc/999.conf' does not exist\n"
    for args in (["status", "999"], ["config", "999", "--current"], ["exec", "999", "--", "true"]):
        done = run(host.pct, *args)
        assert (done.returncode, done.stderr) == (2, message), args
    stopped = run(host.pct, "exec", "201", "--", "true")
    assert (stopped.returncode, stopped.stderr) == (255, "container '201' not running!\n")


def test_pct_does_not_start_a_template(host: HostPaths) -> None:
    config = host.container(201).config
    config.write_text(config.read_text() + "template: 1\n")
    refused = run(host.pct, "start", "201")
    assert (refused.returncode, refused.stderr) == (
        255,
        "you can't start a CT if it's a template\n",
    )
    assert run(host.pct, "status", "201").stdout == "status: stopped\n"


def test_pct_and_pvesh_refuse_a_login_that_is_not_the_hosts_root(host: HostPaths) -> None:
    assert run(host.pct, "exec", "200", "--", "true").returncode == 0
    host.root_uid.write_text(f"{os.geteuid() + 1}\n")
    for tool, args in (
        (host.pct, ["exec", "200", "--", "true"]),  # the sh fast path
        (host.pct, ["status", "200"]),
        (host.pvesh, ["get", "/cluster/status", "--output-format", "json"]),
    ):
        done = run(tool, *args)
        assert (done.returncode, done.stdout, done.stderr) == (255, "", "please run as root\n")


# --- pvesh ---------------------------------------------------------------------------------


def test_resources_mark_templates_and_name_guests_by_hostname(host: HostPaths) -> None:
    config = host.container(201).config
    config.write_text(config.read_text().replace("hostname: ct201\n", "template: 1\n"))
    guests = {g["vmid"]: g for g in pvesh_json(host, "/cluster/resources", "--type", "vm")}
    assert (guests[200]["template"], guests[200]["name"]) == (0, "ct200")
    assert (guests[201]["template"], guests[201]["name"]) == (1, "CT201")


def test_cluster_status_of_a_standalone_node(tmp_path: Path) -> None:
    host = lab_host(tmp_path / "lab", standalone=True)
    assert pvesh_json(host, "/cluster/status") == [
        {"id": "node/pve1", "ip": "127.9.1.1", "level": "", "local": 1, "name": "pve1",
         "nodeid": 0, "online": 1, "type": "node"}
    ]  # fmt: skip
    clustered = pvesh_json(lab_host(tmp_path / "other"), "/cluster/status")
    assert [e["type"] for e in clustered] == ["cluster", "node"]


def test_interfaces_give_live_addresses_and_null_for_a_stopped_container(
    host: HostPaths,
) -> None:
    config = host.container(200).config
    config.write_text(config.read_text().replace("ip=127.9.1.10/32", "ip=dhcp"))
    found = pvesh_json(host, "/nodes/pve1/lxc/200/interfaces")
    assert isinstance(found, list) and [i["name"] for i in found] == ["lo", "eth0"]
    eth0 = found[1]
    assert eth0["inet"] == "127.9.1.10/32"  # the lab's lease
    assert eth0["ip-addresses"] == [
        {"ip-address": "127.9.1.10", "ip-address-type": "inet", "prefix": 32},
        {"ip-address": "fe80::be24:11ff:fe00:0", "ip-address-type": "inet6", "prefix": 64},
    ]
    assert eth0["hwaddr"] == eth0["hardware-address"] == "bc:24:11:00:00:00"
    assert pvesh_json(host, "/nodes/pve1/lxc/201/interfaces") is None
