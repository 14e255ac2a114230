"""What discovery runs on a Proxmox host, as argv lists: built here, never run here.

Formats are recorded with their sources in docs/field-notes/proxmox.md
("Discovering a Proxmox cluster").
"""

from __future__ import annotations

from orchestrator.container.shell import script

TOOLS = ("pvesh", "pct", "nvidia-smi")


def tool_paths() -> list[str]:
    """`NAME PATH` per tool the login's PATH finds, `NAME -` for the others."""
    words = " ".join(TOOLS)
    return script(
        f'for t in {words}; do p=$(command -v "$t") || p=-; printf "%s %s\\n" "$t" "$p"; done'
    )


def cluster_resources(pvesh: str) -> list[str]:
    """Every guest of the cluster (qemu and lxc), as JSON."""
    return [pvesh, "get", "/cluster/resources", "--type", "vm", "--output-format", "json"]


def cluster_status(pvesh: str) -> list[str]:
    """The cluster's nodes with their IPs, as JSON."""
    return [pvesh, "get", "/cluster/status", "--output-format", "json"]


def guest_config(pct: str, vmid: int) -> list[str]:
    """A container's configuration as it runs (`--current`: without the changes pending
    for its next start), on this node: `key: value` lines."""
    return [pct, "config", str(vmid), "--current"]


def guest_interfaces(pvesh: str, node: str, vmid: int) -> list[str]:
    """A running container's live addresses (from `ip a` inside it), as JSON."""
    return [pvesh, "get", f"/nodes/{node}/lxc/{vmid}/interfaces", "--output-format", "json"]


def node_gpus(nvidia_smi: str) -> list[str]:
    return [
        nvidia_smi,
        "--query-gpu=index,name,memory.total",
        "--format=csv,noheader,nounits",
    ]
