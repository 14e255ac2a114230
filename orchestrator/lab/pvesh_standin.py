"""The lab's `pvesh`: the two cluster-wide reads `orch inventory discover` makes,
answered from the lab's own state as Proxmox VE answers them.

`python -m orchestrator.lab.pvesh_standin --lab-dir LAB --node NAME <pvesh args>`:
`get /cluster/resources [--type vm|node|storage|sdn]` and `get /cluster/status`,
with `--output-format json` (one line, keys sorted, as pve-common's CLIFormatter
prints it) or `json-pretty`. Field names and types follow pve-manager
(PVE/API2/Cluster.pm, PVE/API2Tools.pm extract_vm_stats): docs/field-notes.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NoReturn

from orchestrator.lab.paths import HostPaths, LabPaths

RESOURCE_TYPES = ("vm", "storage", "node", "sdn")
MIB = 1024 * 1024


class PveshError(Exception):
    """What pvesh prints before exiting 255."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise PveshError(f"400 unable to parse option\n{message}")


def _config(host: HostPaths, vmid: int) -> dict[str, str]:
    path = host.container(vmid).config
    lines = path.read_text().splitlines() if path.exists() else []
    return dict(line.split(": ", 1) for line in lines if ": " in line)


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
            running = state["status"] == "running"
            entries.append(
                {
                    "id": f"lxc/{container.vmid}",
                    "vmid": container.vmid,
                    "node": host.node,
                    "type": "lxc",
                    "status": state["status"],
                    "name": state["name"],
                    "template": 0,
                    "uptime": 3600 if running else 0,
                    "maxcpu": int(config.get("cores", "1")),
                    "cpu": 0,
                    "maxmem": int(config.get("memory", "512")) * MIB,
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


def node_addresses(lab: LabPaths) -> dict[str, str]:
    """Each host's SSH address from `lab.json` (the lab's record of what runs)."""
    state_file = lab.root / "lab.json"
    if not state_file.exists():
        return {}
    nodes = json.loads(state_file.read_text()).get("nodes", [])
    hosts = {h.node for h in lab.hosts()}
    return {n["name"]: n["address"] for n in nodes if n["name"] in hosts}


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
    if path == "/cluster/resources":
        data = cluster_resources(lab, args.type)
    elif path == "/cluster/status" and args.type is None:
        data = cluster_status(lab, node)
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
        sys.stdout.write(answer(lab, node, rest))
    except PveshError as error:
        print(error, file=sys.stderr)
        return 255
    return 0


if __name__ == "__main__":
    sys.exit(main())
