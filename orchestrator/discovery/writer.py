"""A discovered cluster as an inventory file: YAML in orch's schema, with comments
that say what discovery could not know and what to fill in.

Pure: every value from the cluster reaches the file through `yaml.safe_dump`
(so nothing in a name can add keys), and only checked names, numbers and IP
addresses reach the comments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

import yaml

from orchestrator.inventory import SshSettings
from orchestrator.proxmox import Guest, GuestConfig, NodeGpu, NodeInfo

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


class GpuEntry(TypedDict):
    """One GPU of a container as the written inventory lists it."""

    name: str
    memory_mib: int


class ContainerEntry(TypedDict):
    """A container as the written inventory has it (`containers.NAME`, orch's fields)."""

    vmid: int
    host: str
    address: str
    access: str
    gpus: NotRequired[list[GpuEntry]]


@dataclass(frozen=True)
class FoundContainer:
    """An LXC container of the node discovery ran on, with its configuration."""

    guest: Guest
    config: GuestConfig


@dataclass(frozen=True)
class NotRead:
    """Why a node of the cluster was not read."""

    summary: str
    """For the file's comment: fixed words, checked names and addresses only."""
    detail: str
    """For the person running discovery: the error as the transport put it."""


@dataclass(frozen=True)
class NodeRead:
    """One node discovery logged in to, and what it read there."""

    name: str
    address: str
    pct_path: str | None
    containers: list[FoundContainer]
    node_gpus: list[NodeGpu] | None
    """None when the node has no nvidia-smi on its PATH (GPU models unknown)."""
    templates: list[Guest] = field(default_factory=list)
    """Its container templates: left out, Proxmox never starts one."""
    jump: str | None = None
    """The node discovery began at, as `[user@]host[:port]`, when this node answered
    only through it."""


@dataclass(frozen=True)
class Cluster:
    """What discovery read of a cluster, beginning at one node."""

    address: str
    read: list[NodeRead]
    """The nodes logged in to, the one discovery began at first."""
    nodes: list[NodeInfo] = field(default_factory=list)
    unread: dict[str, NotRead] = field(default_factory=dict)
    """Nodes of the cluster not read, by name."""
    elsewhere: list[Guest] = field(default_factory=list)
    """LXC containers of the nodes not read (their configuration is on their own node)."""
    vms: list[Guest] = field(default_factory=list)

    @property
    def node(self) -> str:
        """The node discovery began at."""
        return self.read[0].name

    @property
    def containers(self) -> list[FoundContainer]:
        return [found for node in self.read for found in node.containers]


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


def _yaml(data: Mapping[str, object], indent: int) -> list[str]:
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return [" " * indent + line for line in text.splitlines()]


def _gpus(
    found: FoundContainer, node_gpus: list[NodeGpu] | None
) -> tuple[list[GpuEntry], list[str]]:
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
    entries: list[GpuEntry] = [
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
    read = ", ".join(node.name for node in cluster.read)
    lines = [
        f"# Written by: {command}",
        f"# from node {cluster.node} ({cluster.address}); nodes read: {read}.",
        "# Check it, fill in `vars`, then try:",
        "#   orch render PLAYBOOK -i THIS_FILE",
        "defaults:",
        *_yaml(login.model_dump(exclude_none=True), 2),
        VARS_HINT,
        "hosts:",
    ]
    for node in cluster.read:
        host = {"address": node.address}
        if node.pct_path and node.pct_path != DEFAULT_PCT:
            host["pct_path"] = node.pct_path
        if node.jump:
            lines.append(f"  # {node.name} answered only through {cluster.node}: its jump host")
            host["jump"] = node.jump
        lines += _yaml({node.name: host}, 2)
    lines += _unread_nodes(cluster)
    names = iter(container_names(cluster.containers))
    groups: dict[str, list[str]] = {}
    lines.append("containers:" if cluster.containers else "containers: {}")
    for node in cluster.read:
        lines += _templates(node.templates)
        for found in node.containers:
            name = next(names)
            lines += _container(name, found, node, groups)
    lines += ["groups:", *_yaml(groups, 2)] if groups else ["groups: {}"]
    return "\n".join(lines) + "\n"


def _templates(templates: list[Guest]) -> list[str]:
    return [
        line
        for template in templates
        for line in (
            f"  # CT {template.vmid} is a template, left out: Proxmox does not start templates",
            f"  # (to deploy, clone it: pct clone {template.vmid} NEWID --full)",
        )
    ]


def _container(
    name: str, found: FoundContainer, node: NodeRead, groups: dict[str, list[str]]
) -> list[str]:
    """A container's entry with its comments; adds it to its groups."""
    gpus, gpu_comments = _gpus(found, node.node_gpus)
    entry: ContainerEntry = {
        "vmid": found.guest.vmid,
        "host": node.name,
        "address": found.config.address or name,
        "access": "pct",
    }
    if gpus:
        entry["gpus"] = gpus
    groups.setdefault(group_name("node", node.name), []).append(name)
    if found.config.gpu_minors:
        groups.setdefault("gpu", []).append(name)
    for model in sorted({gpu["name"] for gpu in gpus}):
        groups.setdefault(group_name("gpu", model), []).append(name)
    return [
        *_status_comments(name, found),
        *_yaml({name: entry}, 2),
        *(f"    {comment}" for comment in gpu_comments),
    ]


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


def _unread_nodes(cluster: Cluster) -> list[str]:
    """Comments on what discovery could not read: nodes it could not log in to, VMs."""
    lines = []
    for node in cluster.nodes:
        why = cluster.unread.get(node.name)
        if why is None or not NAME.match(node.name):
            continue
        where = node.ip or "address unknown"
        lines.append(f"  # {node.name} ({where}): a node of this cluster, not read: {why.summary}")
        guests = [g for g in cluster.elsewhere if g.node == node.name]
        if guests:
            listed = ", ".join(str(g.vmid) for g in guests)
            lines.append(f"  #   its containers {listed} are read on that node; to add them:")
            target = node.ip or "ITS_ADDRESS"
            lines.append(f"  #   orch inventory discover --address {target} -o {node.name}.yaml")
    if cluster.vms:
        listed = ", ".join(f"{g.vmid} on {g.node}" for g in cluster.vms if NAME.match(g.node))
        lines.append(f"  # QEMU VMs are not managed by orch: {listed}")
    return lines
