"""A discovered cluster as an inventory file: YAML in orch's schema, with comments
that say what discovery could not know and what to fill in.

Pure: every value from the cluster reaches the file through `yaml.safe_dump`
(so nothing in a name can add keys), and only checked names, numbers and IP
addresses reach the comments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from orchestrator.discovery.facts import Guest, GuestConfig, NodeGpu, NodeInfo
from orchestrator.inventory import SshSettings

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
DEFAULT_PCT = "/usr/sbin/pct"
VARS_HINT = """\
  # vars: the values your playbooks' templates use ({{ vars.NAME }}); the same for every
  # container here, or set per container under containers.NAME.vars. For qwen-dflash:
  # vars:
  #   models_dir: /opt/models       # holds Qwen3.6-27B and Qwen3.6-27B-DFlash
  #   vllm: /usr/local/bin/vllm     # the vLLM executable inside the containers
  #   nvidia_smi: /usr/bin/nvidia-smi
  #   state_dir: /var/lib/orch      # orch's releases, logs and lock"""


@dataclass(frozen=True)
class FoundContainer:
    """An LXC container of the node discovery ran on, with its configuration."""

    guest: Guest
    config: GuestConfig


@dataclass(frozen=True)
class Cluster:
    """What discovery read through one node."""

    node: str
    address: str
    pct_path: str | None
    containers: list[FoundContainer]
    node_gpus: list[NodeGpu] | None
    """None when the node has no nvidia-smi on its PATH (GPU models unknown)."""
    nodes: list[NodeInfo] = field(default_factory=list)
    elsewhere: list[Guest] = field(default_factory=list)
    """LXC containers of the other nodes (their configuration is on their own node)."""
    vms: list[Guest] = field(default_factory=list)
    templates: list[Guest] = field(default_factory=list)
    """This node's container templates: left out, Proxmox never starts one."""


def safe_name(candidate: str | None, fallback: str) -> str:
    return candidate if candidate and NAME.match(candidate) else fallback


def group_name(prefix: str, text: str) -> str:
    """`NVIDIA RTX A6000` -> `gpu_nvidia_rtx_a6000`."""
    return f"{prefix}_" + "_".join(re.findall(r"[a-z0-9]+", text.lower()))[:50]


def container_names(containers: Iterable[FoundContainer]) -> list[str]:
    """The guest's name when usable and unique, else `ct<vmid>`-style names."""
    names: list[str] = []
    for found in containers:
        vmid = found.guest.vmid
        name = safe_name(found.guest.name or found.config.hostname, f"ct{vmid}")
        names.append(name if name not in names else f"{name}-{vmid}")
    return names


def _yaml(data: dict[str, Any], indent: int) -> list[str]:
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return [" " * indent + line for line in text.splitlines()]


def _gpus(found: FoundContainer, node_gpus: list[NodeGpu] | None) -> tuple[list[dict], list[str]]:
    """(gpu entries, comments) for the devices passed through to a container."""
    minors = found.config.gpu_minors
    devices = ", ".join(f"/dev/nvidia{m}" for m in minors)
    if not minors:
        return [], []
    if node_gpus is None:
        return [], [
            f"# {len(minors)} GPU(s) passed through ({devices}); the node has no nvidia-smi,",
            "# so add each as {name: MODEL, memory_mib: N} under gpus",
        ]
    by_index = {gpu.index: gpu for gpu in node_gpus}
    entries = [
        {"name": by_index[m].name, "memory_mib": by_index[m].memory_mib}
        for m in minors
        if m in by_index
    ]
    missing = [m for m in minors if m not in by_index]
    comments = (
        [f"# not listed by the node's nvidia-smi: {', '.join(f'/dev/nvidia{m}' for m in missing)}"]
        if missing
        else []
    )
    return entries, comments


def inventory_text(cluster: Cluster, login: SshSettings, command: str) -> str:
    """The inventory file for a discovered cluster."""
    lines = [
        f"# Written by: {command}",
        f"# from node {cluster.node} ({cluster.address}). Check it, fill in `vars`, then try:",
        "#   orch render PLAYBOOK -i THIS_FILE",
        "defaults:",
        *_yaml(login.model_dump(exclude_none=True), 2),
        VARS_HINT,
        "hosts:",
    ]
    host: dict[str, Any] = {"address": cluster.address}
    if cluster.pct_path and cluster.pct_path != DEFAULT_PCT:
        host["pct_path"] = cluster.pct_path
    lines += _yaml({cluster.node: host}, 2)
    lines += _other_nodes(cluster)
    names = container_names(cluster.containers)
    groups: dict[str, list[str]] = {}
    lines.append("containers:" if cluster.containers else "containers: {}")
    for template in cluster.templates:
        lines += [
            f"  # CT {template.vmid} is a template, left out: Proxmox does not start templates",
            f"  # (to deploy, clone it: pct clone {template.vmid} NEWID --full)",
        ]
    for name, found in zip(names, cluster.containers, strict=True):
        gpus, gpu_comments = _gpus(found, cluster.node_gpus)
        entry: dict[str, Any] = {
            "vmid": found.guest.vmid,
            "host": cluster.node,
            "address": found.config.address or name,
            "access": "pct",
        }
        if gpus:
            entry["gpus"] = gpus
        lines += _status_comments(name, found)
        lines += _yaml({name: entry}, 2)
        lines += [f"    {comment}" for comment in gpu_comments]
        groups.setdefault(group_name("node", cluster.node), []).append(name)
        if found.config.gpu_minors:
            groups.setdefault("gpu", []).append(name)
        for model in sorted({gpu["name"] for gpu in gpus}):
            groups.setdefault(group_name("gpu", model), []).append(name)
    lines += ["groups:", *_yaml(groups, 2)] if groups else ["groups: {}"]
    return "\n".join(lines) + "\n"


def _status_comments(name: str, found: FoundContainer) -> list[str]:
    """What the inventory cannot say about a container: not running, no static address."""
    lines = []
    status, vmid = found.guest.status, found.guest.vmid
    if status == "stopped":
        lines.append(f"  # {name} is stopped: start it with: pct start {vmid}")
    elif status != "running":
        shown = status if NAME.match(status) else "in no known state"
        lines.append(f"  # {name} is {shown}: see why with: pct status {vmid} --verbose")
    note = found.config.address_note or "no static address"
    if found.config.address is None:
        lines.append(
            f"  # {name}: {note}; its name stands in for the address: set the IP its "
            "server listens on"
        )
    elif found.config.address_note:
        lines.append(
            f"  # {name}: {note}; {found.config.address} is its live address (a new lease "
            "may change it)"
        )
    return lines


def _other_nodes(cluster: Cluster) -> list[str]:
    """Comments on what the node discovery ran on cannot read: other nodes, VMs."""
    lines = []
    for node in cluster.nodes:
        if node.name == cluster.node or not NAME.match(node.name):
            continue
        guests = [g for g in cluster.elsewhere if g.node == node.name]
        where = node.ip or "address unknown"
        state = "online" if node.online else "offline"
        lines.append(f"  # {node.name} ({where}, {state}): another node of this cluster")
        if guests:
            listed = ", ".join(str(g.vmid) for g in guests)
            lines.append(f"  #   its containers {listed} are read on that node; to add them:")
            target = node.ip or "ITS_ADDRESS"
            lines.append(f"  #   orch inventory discover --address {target} -o {node.name}.yaml")
    if cluster.vms:
        listed = ", ".join(f"{g.vmid} on {g.node}" for g in cluster.vms if NAME.match(g.node))
        lines.append(f"  # QEMU VMs are not managed by orch: {listed}")
    return lines
