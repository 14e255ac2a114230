"""The lab's `pvesh`: the reads `orch inventory discover` makes, answered from the
lab's own state as Proxmox VE answers them.

`python -m orchestrator.lab.pvesh_standin --lab-dir LAB --node NAME <pvesh args>`:
`get /cluster/resources [--type vm|node|storage|sdn]`, `get /cluster/status` and
`get /nodes/NODE/lxc/VMID/interfaces`, with `--output-format json` (one line, keys
sorted, as pve-common's CLIFormatter prints it) or `json-pretty`. Field names and
types follow pve-manager (PVE/API2/Cluster.pm, PVE/API2Tools.pm extract_vm_stats)
and pve-container (API2/LXC.pm `ip`, LXC.pm `get_interfaces`); a standalone node
(the lab's `standalone`) has no cluster entry. Like the real one it runs only as
root (pve-common RESTEnvironment.pm `setup_default_cli_env`).
docs/field-notes/proxmox.md.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import sys
from pathlib import Path
from typing import NoReturn

from orchestrator.lab.paths import HostPaths, LabPaths
from orchestrator.lab.pveconf import Section, is_template, network, parse

RESOURCE_TYPES = ("vm", "storage", "node", "sdn")
MIB = 1024 * 1024


class PveshError(Exception):
    """What pvesh prints before exiting 255."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise PveshError(f"400 unable to parse option\n{message}")


def _config(host: HostPaths, vmid: int) -> Section:
    """The configuration as it runs (the file's current section, not its pending one)."""
    path = host.container(vmid).config
    return parse(path.read_text() if path.exists() else "").current


def guest_entries(lab: LabPaths) -> list[dict]:
    """`type: lxc` entries for every container of every lab host (VMIDs sorted as strings,
    as Perl's `sort keys` does)."""
    entries = []
    for host in lab.hosts():
        for container in host.containers():
            if not container.state.exists():
                continue
            state = json.loads(container.state.read_text())
            config = _config(host, container.vmid)
            options = config.options
            running = state["status"] == "running"
            entries.append(
                {
                    "id": f"lxc/{container.vmid}",
                    "vmid": container.vmid,
                    "node": host.node,
                    "type": "lxc",
                    "status": state["status"],
                    "name": options.get("hostname") or f"CT{container.vmid}",
                    "template": 1 if is_template(config) else 0,
                    "uptime": 3600 if running else 0,
                    "maxcpu": int(options.get("cores", "1")),
                    "cpu": 0,
                    "maxmem": int(options.get("memory", "512")) * MIB,
                    "mem": 0,
                    "maxdisk": 8 * 1024 * MIB,
                    "disk": 0,
                    "netin": 0,
                    "netout": 0,
                    "diskread": 0,
                    "diskwrite": 0,
                }
            )
    return sorted(entries, key=lambda e: str(e["vmid"]))


def lab_record(lab: LabPaths) -> dict:
    """`lab.json`: the lab's record of what runs (its spec, nodes and containers)."""
    state_file = lab.root / "lab.json"
    return json.loads(state_file.read_text()) if state_file.exists() else {}


def node_addresses(lab: LabPaths) -> dict[str, str]:
    """Each host's SSH address from `lab.json`."""
    hosts = {h.node for h in lab.hosts()}
    return {n["name"]: n["address"] for n in lab_record(lab).get("nodes", []) if n["name"] in hosts}


def cluster_resources(lab: LabPaths, kind: str | None) -> list[dict]:
    if kind not in (None, *RESOURCE_TYPES):
        raise PveshError(
            "400 Parameter verification failed.\n"
            f"type: value '{kind}' does not have a value in the enumeration "
            f"'{', '.join(RESOURCE_TYPES)}'"
        )
    nodes = [
        {"id": f"node/{h.node}", "type": "node", "node": h.node, "status": "online", "level": ""}
        for h in lab.hosts()
    ]
    guests = guest_entries(lab)
    return {None: nodes + guests, "vm": guests, "node": nodes}.get(kind, [])


def cluster_status(lab: LabPaths, local: str) -> list[dict]:
    addresses = node_addresses(lab)
    hosts = lab.hosts()
    if lab_record(lab).get("spec", {}).get("standalone"):
        # API2/Cluster.pm get_status: no cluster, a "fake entry for local node".
        return [
            {"type": "node", "id": f"node/{local}", "name": local, "ip": addresses.get(local),
             "local": 1, "nodeid": 0, "online": 1, "level": ""}
        ]  # fmt: skip
    entries: list[dict] = [
        {
            "type": "cluster",
            "id": "cluster",
            "name": "orch-lab",
            "nodes": len(hosts),
            "version": len(hosts),
            "quorate": 1,
        }
    ]
    for nodeid, host in enumerate(hosts, start=1):
        entry = {
            "type": "node",
            "id": f"node/{host.node}",
            "name": host.node,
            "nodeid": nodeid,
            "local": 1 if host.node == local else 0,
            "online": 1,
            "level": "",
        }
        if host.node in addresses:
            entry["ip"] = addresses[host.node]
        entries.append(entry)
    return entries


def eui64_link_local(hwaddr: str) -> str:
    """The fe80::/64 address the kernel gives an interface with this MAC (EUI-64)."""
    octets = [int(part, 16) for part in hwaddr.split(":")]
    octets[0] ^= 0x02
    interface_id = [*octets[:3], 0xFF, 0xFE, *octets[3:]]
    return str(ipaddress.IPv6Address(bytes([0xFE, 0x80, *[0] * 6, *interface_id])))


def _address(entry: dict, family: str, address: str, prefix: int) -> None:
    """One `addr_info` of `ip --json a`, as LXC.pm get_interfaces reports it."""
    entry[family] = f"{address}/{prefix}"
    entry["ip-addresses"].append(
        {"ip-address-type": family, "ip-address": address, "prefix": prefix}
    )


def interfaces(lab: LabPaths, node: str, vmid: str) -> list[dict] | None:
    """`/nodes/NODE/lxc/VMID/interfaces`: the live addresses (`ip --json a` in the
    container's network namespace), None (`null`) when the container is not running.
    A static `ip=` is what runs; the lab's DHCP (and a `manual` set-up) hands each
    container its lab address."""
    found = lab.host(node).container(int(vmid)) if vmid.isdigit() else None
    if found is None or not found.state.exists():
        return None
    if json.loads(found.state.read_text())["status"] != "running":
        return None
    leases = {c["vmid"]: c["address"] for c in lab_record(lab).get("containers", [])}
    loopback = {"name": "lo", "hwaddr": "00:00:00:00:00:00", "ip-addresses": []}
    loopback["hardware-address"] = loopback["hwaddr"]
    _address(loopback, "inet", "127.0.0.1", 8)
    _address(loopback, "inet6", "::1", 128)
    result = [loopback]
    options = _config(lab.host(node), int(vmid)).options
    for key in sorted(
        (k for k in options if k[:3] == "net" and k[3:].isdigit()), key=lambda k: int(k[3:])
    ):
        net = network(options[key])
        hwaddr = net.get("hwaddr", "bc:24:11:00:00:00").lower()
        entry = {"name": net.get("name", "eth0"), "hwaddr": hwaddr, "hardware-address": hwaddr,
                 "ip-addresses": []}  # fmt: skip
        ip = net.get("ip", "")
        if "/" in ip:
            address, prefix = ip.split("/")
            _address(entry, "inet", address, int(prefix))
        elif ip in ("dhcp", "manual") and int(vmid) in leases:
            _address(entry, "inet", leases[int(vmid)], 32)
        ip6 = net.get("ip6", "")
        if "/" in ip6:
            address, prefix = ip6.split("/")
            _address(entry, "inet6", address, int(prefix))
        _address(entry, "inet6", eui64_link_local(hwaddr), 64)
        result.append(entry)
    return result


def answer(lab: LabPaths, node: str, argv: list[str]) -> str:
    """pvesh's output for argv (what it prints on stdout)."""
    parser = Parser(prog="pvesh", add_help=False)
    parser.add_argument("verb")
    parser.add_argument("path")
    parser.add_argument("--type")
    parser.add_argument("--output-format", default="text")
    args = parser.parse_args(argv)
    if args.verb != "get":
        raise PveshError(f"the lab's pvesh answers 'get' only, not {args.verb!r}")
    if args.output_format not in ("json", "json-pretty"):
        raise PveshError("the lab's pvesh prints --output-format json or json-pretty only")
    path = "/" + args.path.strip("/")
    data: list[dict] | None
    if path == "/cluster/resources":
        data = cluster_resources(lab, args.type)
    elif path == "/cluster/status" and args.type is None:
        data = cluster_status(lab, node)
    elif (found := re.fullmatch(r"/nodes/([^/]+)/lxc/([^/]+)/interfaces", path)) and not args.type:
        data = interfaces(lab, found.group(1), found.group(2))
    else:
        raise PveshError(f"no '{args.verb}' handler for '{path}' in the lab's pvesh")
    if args.output_format == "json-pretty":
        return json.dumps(data, sort_keys=True, indent=3) + "\n"
    return json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 4 or args[0] != "--lab-dir" or args[2] != "--node":
        print("usage: pvesh_standin --lab-dir DIR --node NAME <pvesh args>", file=sys.stderr)
        return 2
    lab, node, rest = LabPaths(Path(args[1])), args[3], args[4:]
    try:
        if not lab.host(node).runs_as_root():
            raise PveshError("please run as root")
        sys.stdout.write(answer(lab, node, rest))
    except PveshError as error:
        print(error, file=sys.stderr)
        return 255
    return 0


if __name__ == "__main__":
    sys.exit(main())
