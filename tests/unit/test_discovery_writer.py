"""Discovery's inventory writer: what a cluster read (recorded pvesh, pct and nvidia-smi
output) becomes as an inventory, which orch's own loader must accept as written; and
the first node as jump host."""

from __future__ import annotations

from pathlib import Path

import pytest
from pvenodes import recorded

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
from orchestrator.proxmox import (
    Guest,
    GuestConfig,
    NodeGpu,
    parse_cluster_status,
    parse_guest_config,
    parse_node_gpus,
    parse_resources,
)


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
