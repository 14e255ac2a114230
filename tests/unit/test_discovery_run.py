"""Discovery driven in memory: `discover` logs in through the `connect` it is given to
Proxmox nodes that answer with recorded pvesh, pct and nvidia-smi output
(tests/pvenodes.py), so what it reads of a cluster, whom it logs in to and what it
gives up on are checked without a lab (tests/lab/test_discovery.py runs it for real)."""

from __future__ import annotations

import json

import pytest
from pvenodes import ScriptedCluster, ScriptedNode, recorded

from orchestrator.discovery.run import discover
from orchestrator.discovery.writer import FoundContainer, NodeRead, NotRead
from orchestrator.errors import NeedsAttention, StepFailed
from orchestrator.inventory import SshSettings
from orchestrator.proxmox import (
    Guest,
    GuestConfig,
    parse_guest_config,
    parse_node_gpus,
    parse_resources,
)
from orchestrator.transport.base import Result

ROOT = SshSettings(user="root")


def two_nodes() -> ScriptedCluster:
    """pve-train (asked) with two containers and a template; kpro5 has a container too."""
    train = ScriptedNode(
        recorded("cluster-resources.json"),
        recorded("cluster-status.json"),
        configs={
            1001: recorded("pct-config-devices.txt"),
            200: recorded("pct-config-mount-entries.txt"),
        },
        gpus=recorded("node-gpus.csv"),
    )
    return ScriptedCluster({"192.0.2.20": train})


def guest(vmid: int, resources: str = "cluster-resources.json") -> Guest:
    return next(g for g in parse_resources(recorded(resources)) if g.vmid == vmid)


def config(name: str) -> GuestConfig:
    return parse_guest_config(recorded(name))


def test_the_node_asked_is_read_whole_and_an_unreachable_member_is_named() -> None:
    cluster = two_nodes()

    found = discover("192.0.2.20", ROOT, cluster.connect)

    assert found.read == [
        NodeRead(
            "pve-train",
            "192.0.2.20",
            "/usr/sbin/pct",
            [
                FoundContainer(
                    guest(200), parse_guest_config(recorded("pct-config-mount-entries.txt"))
                ),
                FoundContainer(guest(1001), parse_guest_config(recorded("pct-config-devices.txt"))),
            ],
            parse_node_gpus(recorded("node-gpus.csv")),
            [guest(300)],
        )
    ]
    assert list(found.unread) == ["kpro5"]
    assert found.unread["kpro5"].summary == (
        "no SSH connection to it (directly or through the first node)"
    )
    assert [g.vmid for g in found.elsewhere] == [129]
    assert [g.vmid for g in found.vms] == [105]
    assert cluster.logins == [
        ("192.0.2.20", "192.0.2.20", None),
        ("kpro5", "192.0.2.15", None),
        ("kpro5", "192.0.2.15", "root@192.0.2.20"),  # then through the node asked
    ]


def test_only_the_nodes_own_containers_are_configured_and_a_template_never() -> None:
    cluster = two_nodes()
    discover("192.0.2.20", ROOT, cluster.connect)
    (host,) = cluster.opened
    configured = [call.argv for call in host.calls if call.argv[1:2] == ("config",)]
    assert configured == [
        ("/usr/sbin/pct", "config", "200", "--current"),
        ("/usr/sbin/pct", "config", "1001", "--current"),
    ]


def test_a_template_without_rrd_data_is_left_out_by_its_own_config() -> None:
    """`/cluster/resources` has `template` only once the guest has RRD data (pve-manager
    9.2.11 PVE/API2Tools.pm:95-100): a template listed bare, as a fresh one is, is known
    by the `template: 1` of `pct config --current`."""
    listing = json.loads(recorded("cluster-resources.json"))
    bare = {"id": "lxc/300", "node": "pve-train", "status": "unknown", "type": "lxc", "vmid": 300}
    listing = [bare if entry["vmid"] == 300 else entry for entry in listing]
    train = ScriptedNode(
        json.dumps(listing),
        recorded("cluster-status.json"),
        configs={
            1001: recorded("pct-config-devices.txt"),
            200: recorded("pct-config-mount-entries.txt"),
            300: recorded("pct-config-template.txt"),
        },
    )

    found = discover("192.0.2.20", ROOT, ScriptedCluster({"192.0.2.20": train}).connect)

    (node,) = found.read
    assert [c.guest.vmid for c in node.containers] == [200, 1001]
    assert [g.vmid for g in node.templates] == [300]


def four_nodes() -> ScriptedCluster:
    """pve1 asked; pve2 reachable only through pve1, with a running DHCP container and a
    stopped one; pve3 direct; pve4 offline in the cluster's status."""
    listing = recorded("cluster-resources-four.json"), recorded("cluster-status-four.json")
    static = recorded("pct-config-devices.txt")
    dhcp = recorded("pct-config-dhcp.txt")
    return ScriptedCluster(
        {
            "10.20.0.11": ScriptedNode(*listing, configs={1101: static}),
            "10.20.0.12": ScriptedNode(
                *listing,
                configs={1201: dhcp, 1202: dhcp},
                interfaces={1201: recorded("lxc-interfaces.json")},
            ),
            "10.20.0.13": ScriptedNode(*listing, configs={1301: static}, tools="pvesh -\npct -\n"),
        },
        behind_jump={"10.20.0.12"},
    )


def test_every_member_is_read_directly_or_through_the_first_node() -> None:
    cluster = four_nodes()

    found = discover("10.20.0.11", ROOT, cluster.connect)

    assert [(n.name, n.address, n.jump) for n in found.read] == [
        ("pve1", "10.20.0.11", None),
        ("pve2", "10.20.0.12", "root@10.20.0.11"),
        ("pve3", "10.20.0.13", None),
    ]
    assert found.unread == {
        "pve4": NotRead("offline in the cluster's status", "pvesh get /cluster/status: online 0")
    }
    assert [g.vmid for g in found.elsewhere] == [1401]  # pve4's, unread
    assert ("pve4", "10.20.0.14", None) not in cluster.logins  # offline: no login tried


def test_a_running_dhcp_container_gets_its_live_address_and_a_stopped_one_none() -> None:
    found = discover("10.20.0.11", ROOT, four_nodes().connect)
    pve2 = next(node for node in found.read if node.name == "pve2")
    addresses = {c.guest.vmid: (c.config.address, c.config.address_note) for c in pve2.containers}
    assert addresses == {
        1201: ("2001:db8::51", "net0 has ip=dhcp"),  # eth0's; link-local never
        1202: (None, "net0 has ip=dhcp"),
    }


def test_a_node_without_tools_on_path_falls_back_to_pct_and_lists_no_gpus() -> None:
    found = discover("10.20.0.11", ROOT, four_nodes().connect)
    pve3 = next(node for node in found.read if node.name == "pve3")
    assert (pve3.pct_path, pve3.node_gpus) == (None, None)
    assert [c.guest.vmid for c in pve3.containers] == [1301]


def test_no_pvesh_is_no_proxmox_host() -> None:
    cluster = two_nodes()
    cluster.nodes["192.0.2.20"].tools = "pvesh -\npct -\nnvidia-smi -\n"
    with pytest.raises(NeedsAttention, match="no pvesh on the login's PATH"):
        discover("192.0.2.20", ROOT, cluster.connect)


def test_a_login_pvesh_refuses_is_told_to_log_in_as_root() -> None:
    cluster = two_nodes()
    refused = Result((), 255, b"", b"ipcc_send_rec[1] failed: please run as root\n")
    cluster.nodes["192.0.2.20"].refuse = {"cluster_resources": refused}
    with pytest.raises(NeedsAttention, match=r"pvesh and pct need root .*--become sudo"):
        discover("192.0.2.20", ROOT, cluster.connect)


def test_without_the_cluster_status_the_only_node_with_guests_is_the_one_asked() -> None:
    node = ScriptedNode(
        '[{"type": "lxc", "vmid": 200, "node": "solo", "status": "stopped"}]',
        None,
        configs={200: recorded("pct-config-dhcp.txt")},
    )
    found = discover("192.0.2.30", ROOT, ScriptedCluster({"192.0.2.30": node}).connect)
    assert [n.name for n in found.read] == ["solo"] and found.nodes == []


def test_without_the_cluster_status_guests_on_several_nodes_leave_the_node_unknown() -> None:
    cluster = two_nodes()
    cluster.nodes["192.0.2.20"].status = None
    with pytest.raises(NeedsAttention, match="cannot tell which node answers"):
        discover("192.0.2.20", ROOT, cluster.connect)


def test_every_login_is_ended() -> None:
    cluster = four_nodes()
    discover("10.20.0.11", ROOT, cluster.connect)
    assert sorted(cluster.closed) == ["10.20.0.11", "pve2", "pve3"]


def test_a_container_pct_cannot_read_on_the_node_asked_stops_discovery() -> None:
    cluster = two_nodes()
    del cluster.nodes["192.0.2.20"].configs[1001]
    with pytest.raises(StepFailed, match="pct config 1001"):
        discover("192.0.2.20", ROOT, cluster.connect)


def test_a_node_name_proxmox_would_refuse_stops_discovery_before_any_use() -> None:
    """Issue 35: a member named `pve2\\nhosts: {}` wrote YAML lines into the inventory's
    comments (exit 0); now pvesh's reply is refused, naming it, and nothing is logged in to."""
    hostile = recorded("cluster-status.json").replace('"kpro5"', '"kpro5\\nhosts: {}"')
    assert hostile != recorded("cluster-status.json")
    cluster = ScriptedCluster(
        {"192.0.2.20": ScriptedNode(recorded("cluster-resources.json"), hostile)}
    )

    with pytest.raises(NeedsAttention, match=r"'kpro5\\nhosts: \{\}' is not a Proxmox node name"):
        discover("192.0.2.20", ROOT, cluster.connect)

    assert [name for name, _, _ in cluster.logins] == ["192.0.2.20"]
