"""Discovery: the inventory writer, and `orch inventory discover` against a real lab
host (the parsers: tests/unit/test_proxmox.py; the runner in memory:
tests/unit/test_discovery_run.py)."""

from __future__ import annotations

import getpass
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import isolated
import pytest
import yaml
from labtools import FAST, LabHandle, free_network
from pvenodes import recorded

from orchestrator.container.shell import parse_csv_rows
from orchestrator.discovery.run import jump_through, write_new
from orchestrator.discovery.writer import (
    Cluster,
    FoundContainer,
    NodeRead,
    NotRead,
    inventory_text,
)
from orchestrator.errors import InputError
from orchestrator.inventory import SshSettings, load_inventory
from orchestrator.lab.cluster import Lab, LabSpec, stop_pids
from orchestrator.lab.paths import HostPaths
from orchestrator.proxmox import (
    Guest,
    GuestConfig,
    NodeGpu,
    parse_cluster_status,
    parse_guest_config,
    parse_node_gpus,
    parse_resources,
)

# --- writer -----------------------------------------------------------------------------


def cluster_from_fixtures(node_gpus: list[NodeGpu] | None) -> Cluster:
    guests = parse_resources(recorded("cluster-resources.json"))
    configs = {
        1001: parse_guest_config(recorded("pct-config-devices.txt")),
        200: parse_guest_config(recorded("pct-config-mount-entries.txt")),
    }
    here = [g for g in guests if g.node == "pve-train" and g.type == "lxc"]
    node = NodeRead(
        "pve-train",
        "192.0.2.20",
        "/usr/sbin/pct",
        [FoundContainer(g, configs[g.vmid]) for g in here if not g.template],
        node_gpus,
        [g for g in here if g.template],
    )
    return Cluster(
        address="192.0.2.20",
        read=[node],
        nodes=parse_cluster_status(recorded("cluster-status.json")),
        unread={"kpro5": NotRead("no SSH connection to it", "connect: connection refused")},
        elsewhere=[g for g in guests if g.node != "pve-train" and g.type == "lxc"],
        vms=[g for g in guests if g.type == "qemu"],
    )


def one_node(containers: list[FoundContainer], gpus: list[NodeGpu] | None = None) -> Cluster:
    return Cluster("192.0.2.20", [NodeRead("pve-train", "192.0.2.20", None, containers, gpus)])


def written(tmp_path: Path, cluster: Cluster) -> tuple[str, dict]:
    text = inventory_text(cluster, SshSettings(user="root"), "orch inventory discover")
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    inventory = load_inventory(path)  # orch's own schema accepts it as written
    return text, inventory.model_dump()


def test_written_inventory_has_containers_gpus_groups_and_comments(tmp_path: Path) -> None:
    text, inventory = written(
        tmp_path, cluster_from_fixtures(parse_node_gpus(recorded("node-gpus.csv")))
    )
    containers = inventory["containers"]
    assert list(containers) == ["ct200", "gpu-b"]
    assert containers["gpu-b"]["vmid"] == 1001 and containers["gpu-b"]["access"] == "pct"
    assert [g["name"] for g in containers["gpu-b"]["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert [g["memory_mib"] for g in containers["ct200"]["gpus"]] == [49140, 49140]
    assert inventory["groups"] == {
        "node_pve_train": ["ct200", "gpu-b"],
        "gpu": ["ct200", "gpu-b"],
        "gpu_nvidia_rtx_a6000": ["ct200"],
        "gpu_nvidia_h100_80gb_hbm3": ["gpu-b"],
    }
    host = inventory["hosts"]["pve-train"]
    assert host["address"] == "192.0.2.20" and host["pct_path"] is None  # the default: not written
    assert "# ct200 is unknown: see why with: pct status 200 --verbose" in text
    assert "start it" not in text  # nothing here is known to be stopped
    assert "# CT 300 is a template, left out: Proxmox does not start templates" in text
    assert "# kpro5 (192.0.2.15): a node of this cluster, not read: no SSH connection to it" in text
    assert "connection refused" not in text  # the transport's words go to the person, not here
    assert "orch inventory discover --address 192.0.2.15 -o kpro5.yaml" in text
    assert "# QEMU VMs are not managed by orch: 105 on pve-train" in text
    assert "  #   models_dir: /opt/models" in text


def test_without_node_gpus_the_passthrough_is_a_comment(tmp_path: Path) -> None:
    text, inventory = written(tmp_path, cluster_from_fixtures(None))
    assert inventory["containers"]["gpu-b"]["gpus"] == []
    assert (
        "# 2 GPU(s) passed through (/dev/nvidia2, /dev/nvidia3); the node has no nvidia-smi" in text
    )
    assert inventory["groups"]["gpu"] == ["ct200", "gpu-b"]


def test_names_from_the_cluster_cannot_add_yaml(tmp_path: Path) -> None:
    evil = "x\nhosts: {}"
    guest = Guest(300, "pve-train", "lxc", "running\n# injected", evil)
    config = GuestConfig(evil, "192.0.2.30", None, (0,))
    cluster = one_node([FoundContainer(guest, config)], [NodeGpu(0, "GPU\nhosts: {}", 1024)])
    text, inventory = written(tmp_path, cluster)
    assert list(inventory["containers"]) == ["ct300"]
    assert inventory["containers"]["ct300"]["gpus"][0]["name"] == "GPU\nhosts: {}"
    assert "injected" not in text and "# ct300 is in no known state" in text


def test_stopped_and_dhcp_containers_get_their_own_comments(tmp_path: Path) -> None:
    stopped = Guest(300, "pve-train", "lxc", "stopped", "cold")
    dhcp = Guest(301, "pve-train", "lxc", "running", "leased")
    cluster = one_node([
        FoundContainer(stopped, GuestConfig("cold", None, "net0 has ip=dhcp", ())),
        FoundContainer(dhcp, GuestConfig("leased", "192.0.2.77", "net0 has ip=dhcp", ())),
    ])  # fmt: skip
    text, inventory = written(tmp_path, cluster)
    assert "# cold is stopped: start it with: pct start 300" in text
    assert "# cold: net0 has ip=dhcp; its name stands in for the address" in text
    assert "# leased: net0 has ip=dhcp; 192.0.2.77 is its live address" in text
    assert inventory["containers"]["leased"]["address"] == "192.0.2.77"


def four_node_cluster() -> Cluster:
    """pve1 asked; pve2 answered through it, pve3 directly; pve4 offline."""
    guests = parse_resources(recorded("cluster-resources-four.json"))
    gpus = parse_node_gpus(recorded("node-gpus.csv"))
    config = parse_guest_config(recorded("pct-config-devices.txt"))

    def on(node: str) -> list[FoundContainer]:
        return [FoundContainer(g, config) for g in guests if g.node == node and g.type == "lxc"]

    jump = jump_through("10.20.0.11", SshSettings(user="root"))
    return Cluster(
        address="10.20.0.11",
        read=[
            NodeRead("pve1", "10.20.0.11", None, on("pve1"), gpus),
            NodeRead("pve2", "10.20.0.12", None, on("pve2"), gpus, jump=jump),
            NodeRead("pve3", "10.20.0.13", "/opt/pve/pct", on("pve3"), None),
        ],
        nodes=parse_cluster_status(recorded("cluster-status-four.json")),
        unread={"pve4": NotRead("offline in the cluster's status", "online 0")},
        elsewhere=[g for g in guests if g.node == "pve4" and g.type == "lxc"],
        vms=[g for g in guests if g.type == "qemu"],
    )


def test_written_inventory_holds_every_node_read_and_names_the_others(tmp_path: Path) -> None:
    text, inventory = written(tmp_path, four_node_cluster())
    assert inventory["hosts"]["pve2"]["jump"] == "root@10.20.0.11"
    assert inventory["hosts"]["pve1"]["jump"] is None and inventory["hosts"]["pve3"]["jump"] is None
    assert {n: h["address"] for n, h in inventory["hosts"].items()} == {
        "pve1": "10.20.0.11", "pve2": "10.20.0.12", "pve3": "10.20.0.13",
    }  # fmt: skip
    assert inventory["hosts"]["pve3"]["pct_path"] == "/opt/pve/pct"
    assert {n: (c["vmid"], c["host"]) for n, c in inventory["containers"].items()} == {
        "a1": (1101, "pve1"), "b1": (1201, "pve2"), "b2": (1202, "pve2"), "c1": (1301, "pve3"),
    }  # fmt: skip
    groups = inventory["groups"]
    assert (groups["node_pve1"], groups["node_pve2"], groups["node_pve3"]) == (
        ["a1"], ["b1", "b2"], ["c1"],
    )  # fmt: skip
    assert groups["gpu_nvidia_h100_80gb_hbm3"] == ["a1", "b1", "b2"]  # pve3 has no nvidia-smi
    assert "# from node pve1 (10.20.0.11); nodes read: pve1, pve2, pve3." in text
    assert "# pve2 answered only through pve1: its jump host" in text
    assert "# pve4 (10.20.0.14): a node of this cluster, not read: offline" in text
    assert "orch inventory discover --address 10.20.0.14 -o pve4.yaml" in text
    assert "# QEMU VMs are not managed by orch: 1402 on pve4" in text
    assert "# b2 is stopped: start it with: pct start 1202" in text


def test_the_first_node_as_jump_host_carries_its_login() -> None:
    assert jump_through("192.0.2.1", SshSettings(user="root", port=2222)) == "root@192.0.2.1:2222"
    assert jump_through("2001:db8::1", SshSettings()) == "[2001:db8::1]"
    assert jump_through("pve1.example", SshSettings(port=22)) == "pve1.example:22"


def test_write_new_never_replaces_without_force(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    write_new(path, "a: 1\n")
    with pytest.raises(InputError, match="exists: choose another -o, or replace it with --force"):
        write_new(path, "b: 2\n")
    assert path.read_text() == "a: 1\n"
    write_new(path, "b: 2\n", force=True)
    assert path.read_text() == "b: 2\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--address", "a b"], "error: --address: 'a b' is not a host name or IP address"),
        (["--address", "h", "--port", "0"], "error: --port: Input should be greater than"),
        (["--address", "h", "--jump", "-oProxyCommand"], "error: --jump: '-oProxyCommand' is not"),
        (["--address", "h", "--identity-file", "/nonexistent/key"], "error: --identity-file:"),
    ],
)
def test_bad_options_are_bad_input_before_connecting(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "inventory", "discover", *args],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.startswith(message), done.stderr


# --- against the lab --------------------------------------------------------------------


def discover_args(lab: LabHandle, *extra: str) -> list[str]:
    host = lab.lab.nodes()[0]
    return [
        "inventory", "discover", "--address", host.address, "--port", str(host.port),
        "--identity-file", str(lab.lab.key), "--known-hosts", str(lab.lab.known_hosts), *extra,
    ]  # fmt: skip


@pytest.mark.lab
def test_discover_writes_the_labs_containers_and_render_accepts_it(
    shared_lab: LabHandle, tmp_path: Path
) -> None:
    output = tmp_path / "discovered.yaml"
    done = shared_lab.orch(*discover_args(shared_lab, "-o", str(output)))
    assert done.code == 0, str(done)
    assert "wrote" in done.stdout and "2 container(s) on pve1" in done.stdout
    first = output.read_text()
    found = yaml.safe_load(first)
    assert_whole_lab(found, shared_lab)
    assert found["groups"]["gpu"] == ["ct200", "ct201"]

    # As written (vars left commented): doctor runs every check and fails the vars one per
    # container, naming each var, the playbook fields that use it and where to set it.
    doctor = shared_lab.orch("doctor", "qwen-dflash", "-i", str(output))
    assert doctor.code == 3, doctor.stdout + doctor.stderr
    lines = doctor.stdout.splitlines()
    text = first.splitlines()
    defaults_line = text.index("defaults:") + 1
    for name in ("ct200", "ct201"):
        assert any(re.match(rf"{name} +container +ok ", line) for line in lines), doctor.stdout
        (row,) = [line for line in lines if re.match(rf"{name} +vars +FAIL ", line)]
        fix = lines[lines.index(row) + 1].strip()
        line = text.index(f"  {name}:") + 1
        assert f"{output}:{line}:3: containers.{name}.vars: no models_dir, vllm, state_dir" in row
        assert re.search(r"models_dir: drafter\.weights line \d+, target\.path line \d+;", row)
        assert f"under containers.{name}.vars (containers.{name} is at {output}:{line}:3)" in fix
        assert f"under defaults.vars ({output}:{defaults_line}:1)" in fix
    dry_run = shared_lab.orch("deploy", "qwen-dflash", "-i", str(output), "--dry-run", "--json")
    assert dry_run.code == 2
    errors = dry_run.json["errors"]
    assert [(e["file"], e["field"]) for e in errors] == [
        (str(output), "containers.ct200.vars"),
        (str(output), "containers.ct201.vars"),
    ]

    # Filled in as the comment says, render accepts it.
    rendered = shared_lab.orch(
        "render", "qwen-dflash", "-i", str(filled(found, shared_lab, tmp_path / "filled.yaml"))
    )
    assert rendered.code == 0, str(rendered)
    assert "ct200" in rendered.stdout and "ct201" in rendered.stdout

    again = shared_lab.orch(*discover_args(shared_lab, "-o", str(output)))
    assert again.code == 2 and "exists" in again.stderr
    assert output.read_text() == first


@pytest.mark.lab
def test_discover_keeps_the_host_key_rules(shared_lab: LabHandle, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    args = discover_args(shared_lab)
    args[args.index("--known-hosts") + 1] = str(empty)
    refused = shared_lab.orch(*args)
    assert refused.code == 3 and "unknown host key" in refused.stderr
    assert not empty.exists()
    accepted = shared_lab.orch(*args, "--accept-new-host-keys")
    assert accepted.code == 0, str(accepted)
    assert shared_lab.lab.nodes()[0].address in empty.read_text()


@pytest.mark.lab
def test_lab_node_gpus_are_the_devices_its_containers_get(shared_lab: LabHandle) -> None:
    """The node's nvidia-smi index N is the GPU a container sees through /dev/nvidiaN."""
    host = shared_lab.lab.paths.host("pve1")
    query = ["--query-gpu=index,uuid", "--format=csv,noheader,nounits"]
    node = dict(parse_csv_rows(subprocess.run([host.nvidia_smi, *query], capture_output=True,
                                              text=True, check=True).stdout))  # fmt: skip
    assert len(node) == 4
    for container in host.containers():
        minors = parse_guest_config(container.config.read_text()).gpu_minors
        inside = parse_csv_rows(subprocess.run([container.nvidia_smi, *query], capture_output=True,
                                               text=True, check=True).stdout)  # fmt: skip
        assert [node[str(m)] for m in minors] == [uuid for _, uuid in inside]


@pytest.mark.lab
def test_a_node_whose_sshd_is_down_is_named_and_the_run_needs_attention(tmp_path: Path) -> None:
    the_lab = Lab(tmp_path / "lab")
    the_lab.up(LabSpec(hosts=2, containers_per_host=1, load_seconds=0.3, network=free_network()))
    try:
        second = next(n for n in the_lab.nodes() if n.name == "pve2")
        stop_pids([second.pid])
        handle = LabHandle(the_lab, {**os.environ, "ORCH_STATE_DIR": str(tmp_path / "state")})
        done = handle.orch(*discover_args(handle))
        assert done.code == 3, done.stderr
        first = handle.lab.nodes()[0]
        assert (
            f"warning: node pve2 not read: directly: connect: {second.address}:2222: "
            "connection refused\n"
        ) in done.stderr
        jump = f"{first.address}:2222"  # no --user: the login is the default one
        assert (
            f"\nthrough {jump}: connect: jump host {jump} cannot reach {second.address}:2222"
        ) in done.stderr
        assert (
            f"# pve2 ({second.address}): a node of this cluster, not read: no SSH connection "
            "to it (directly or through the first node)"
        ) in done.stdout
        assert f"orch inventory discover --address {second.address} -o pve2.yaml" in done.stdout
        written = yaml.safe_load(done.stdout)
        assert list(written["containers"]) == ["ct200"] and list(written["hosts"]) == ["pve1"]
        as_json = handle.orch(*discover_args(handle), "--json")
        assert as_json.code == 3 and as_json.json["result"] == "partial"
        assert [u["name"] for u in as_json.json["unread"]] == ["pve2"]
    finally:
        the_lab.down()


@pytest.fixture(scope="module")
def four_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    """`orch lab up --hosts 4`: four nodes with two containers each, in one cluster."""
    root = tmp_path_factory.mktemp("four")
    env = {**os.environ, "ORCH_STATE_DIR": str(root / "state")}
    handle = LabHandle(Lab(root / "lab"), env)
    up = handle.orch("lab", "up", "--dir", str(root / "lab"), "--hosts", "4",
                     "--load-seconds", "0.3", "--network", free_network())  # fmt: skip
    try:
        assert up.code == 0, str(up)
        yield handle
    finally:
        handle.lab.down()


def filled(found: dict, lab: LabHandle, path: Path) -> Path:
    """The discovered inventory with `vars` filled in as its comment says (the lab's
    paths differ per container)."""
    expected = yaml.safe_load(lab.inventory.read_text())
    for name, container in found["containers"].items():
        container["vars"] = expected["containers"][name]["vars"]
    path.write_text(yaml.safe_dump(found, sort_keys=False))
    return path


def assert_whole_lab(found: dict, lab: LabHandle) -> None:
    """Every node and every container of the lab, where the lab put them."""
    expected = yaml.safe_load(lab.inventory.read_text())
    assert {n: h["address"] for n, h in found["hosts"].items()} == {
        n: h["address"] for n, h in expected["hosts"].items()
    }
    assert {n: h["pct_path"] for n, h in found["hosts"].items()} == {
        n: h["pct_path"] for n, h in expected["hosts"].items()
    }
    keys = ("vmid", "host", "address", "gpus")
    assert {n: [c[k] for k in keys] for n, c in found["containers"].items()} == {
        n: [c[k] for k in keys] for n, c in expected["containers"].items()
    }


@pytest.mark.lab
def test_four_node_lab_is_discovered_whole_from_one_address(
    four_nodes: LabHandle, tmp_path: Path
) -> None:
    output = tmp_path / "discovered.yaml"
    done = four_nodes.orch(*discover_args(four_nodes, "-o", str(output)))
    assert done.code == 0, str(done)
    assert "8 container(s) on pve1, pve2, pve3, pve4" in done.stdout
    load_inventory(output)  # orch's own loader accepts it as written
    found = yaml.safe_load(output.read_text())
    assert_whole_lab(found, four_nodes)
    assert len(found["containers"]) == 8 and len(found["hosts"]) == 4
    assert all("jump" not in host for host in found["hosts"].values())
    assert "# vars:" in output.read_text()
    assert all("vars" not in c for c in found["containers"].values())

    inventory = filled(found, four_nodes, tmp_path / "filled.yaml")
    doctor = four_nodes.orch("doctor", "qwen-dflash", "-i", str(inventory), "--json")
    assert doctor.code == 0, str(doctor)
    names = {t["name"] for t in doctor.json["targets"]}
    assert names == {*found["hosts"], *found["containers"]}
    status = four_nodes.orch("status", "qwen-dflash", "-i", str(inventory), "--json")
    assert status.code == 0, str(status)
    assert {t["name"] for t in status.json["targets"]} == set(found["containers"])


@pytest.mark.lab
@pytest.mark.skipif(not isolated.available(), reason="no unprivileged network namespaces here")
def test_nodes_reached_only_through_the_first_get_it_as_jump_host_and_a_deploy_works(
    four_nodes: LabHandle, tmp_path: Path
) -> None:
    """From a network where only pve1's sshd answers, as an operator outside the nodes'
    network sees a cluster: pve2..pve4 are read through pve1, written with `jump:`, and a
    deploy on pve4's container goes through it."""
    first = four_nodes.lab.nodes()[0]
    reachable = [(first.address, first.port)]
    output = tmp_path / "discovered.yaml"

    def orch_inside(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "orchestrator", *args]
        return isolated.run_isolated(argv, reachable, tmp_path, four_nodes.env)

    done = orch_inside(*discover_args(four_nodes, "--user", getpass.getuser(), "-o", str(output)))
    assert done.returncode == 0, done.stderr
    found = yaml.safe_load(output.read_text())
    assert_whole_lab(found, four_nodes)
    jump = f"{getpass.getuser()}@{first.address}:{first.port}"
    assert {n: h.get("jump") for n, h in found["hosts"].items()} == {
        "pve1": None, "pve2": jump, "pve3": jump, "pve4": jump,
    }  # fmt: skip
    inventory = filled(found, four_nodes, tmp_path / "filled.yaml")
    deploy = orch_inside("deploy", "qwen-dflash", "-i", str(inventory), "--limit", "ct501", *FAST)
    assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
    status = orch_inside("status", "qwen-dflash", "-i", str(inventory), "--json")
    assert status.returncode == 0, status.stderr
    assert "ct501" in status.stdout


@pytest.mark.lab
def test_every_node_of_the_lab_answers_for_the_whole_cluster(four_nodes: LabHandle) -> None:
    """As pmxcfs makes it: the same members and guests from each node, `local` on the one
    asked (pve-manager API2/Cluster.pm get_status :969-989)."""
    hosts = [four_nodes.lab.paths.host(f"pve{i}") for i in range(1, 5)]

    def pvesh(host: HostPaths, *args: str) -> str:
        done = subprocess.run([str(host.pvesh), "get", *args, "--output-format", "json"],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    addresses = {n.name: n.address for n in four_nodes.lab.nodes()}
    for host in hosts:
        status = parse_cluster_status(pvesh(host, "/cluster/status"))
        assert {n.name: n.ip for n in status} == {h.node: addresses[h.node] for h in hosts}
        assert [n.name for n in status if n.local] == [host.node]
        assert all(n.online for n in status)
        guests = parse_resources(pvesh(host, "/cluster/resources", "--type", "vm"))
        assert [(g.vmid, g.node) for g in guests] == [
            (c.vmid, c.host) for c in four_nodes.lab.containers()
        ]
