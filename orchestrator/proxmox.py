"""What orch reads from a Proxmox VE host, for discovery and doctor alike: the command
builders (argv lists, built here, never run here; marked `@builder`, so an in-memory
host answers them by concern) and the pure parsers of what they print.

Output that does not parse is `NeedsAttention` naming what was read, never a traceback.
Formats and their sources: docs/field-notes/proxmox.md ("Discovering a Proxmox cluster").
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from orchestrator import remotejson
from orchestrator.container.shell import builder, parse_csv_rows, reading, script

# -- discovery: the tools, the cluster (pvesh), a container's configuration (pct) -----------

TOOLS = ("pvesh", "pct", "nvidia-smi")


@builder
def tool_paths() -> list[str]:
    """`NAME PATH` per tool the login's PATH finds, `NAME -` for the others."""
    words = " ".join(TOOLS)
    return script(
        f'for t in {words}; do p=$(command -v "$t") || p=-; printf "%s %s\\n" "$t" "$p"; done'
    )


@builder
def cluster_resources(pvesh: str) -> list[str]:
    """Every guest of the cluster (qemu and lxc), as JSON."""
    return [pvesh, "get", "/cluster/resources", "--type", "vm", "--output-format", "json"]


@builder
def cluster_status(pvesh: str) -> list[str]:
    """The cluster's nodes with their IPs, as JSON."""
    return [pvesh, "get", "/cluster/status", "--output-format", "json"]


@builder
def guest_config(pct: str, vmid: int) -> list[str]:
    """A container's configuration as it runs (`--current`: without the changes pending
    for its next start), on this node: `key: value` lines."""
    return [pct, "config", str(vmid), "--current"]


@builder
def guest_interfaces(pvesh: str, node: str, vmid: int) -> list[str]:
    """A running container's live addresses (from `ip a` inside it), as JSON."""
    return [pvesh, "get", f"/nodes/{node}/lxc/{vmid}/interfaces", "--output-format", "json"]


@builder
def node_gpus(nvidia_smi: str) -> list[str]:
    """The node's GPUs, one CSV row each: index, name, total memory in MiB."""
    return [
        nvidia_smi,
        "--query-gpu=index,name,memory.total",
        "--format=csv,noheader,nounits",
    ]


# -- the host as doctor reads it: pct status, sshd's limits --------------------------------

SSHD = "/usr/sbin/sshd"


@builder
def container_status(pct: str, vmid: int) -> list[str]:
    """On the Proxmox host: `status: running` or `status: stopped`."""
    return [pct, "status", str(vmid)]


@builder
def sshd_limits() -> list[str]:
    """The host sshd's session limits from its effective configuration (needs root)."""
    return script(f"{SSHD} -T 2>/dev/null | grep -i -E '^(maxsessions|maxstartups) '")


def parse_container_status(text: str) -> str:
    """`pct status VMID` -> `running`, `stopped`, ... (pct prints `status: WORD`)."""
    with reading("pct status", text):
        label, word = text.split(":", 1)
        if label.strip() != "status":
            raise ValueError("expected 'status: ...'")
        return word.strip()


def parse_sshd_limits(text: str) -> dict[str, str]:
    """`sshd -T` lines kept by sshd_limits -> {maxsessions: "10", ...}."""
    return {
        key.lower(): value.strip()
        for key, _, value in (line.partition(" ") for line in text.splitlines())
        if value
    }


# -- parsers -------------------------------------------------------------------------------

NVIDIA_DEVICE = re.compile(r"/dev/nvidia(\d+)")
NODE_NAME = re.compile(r"[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?")
"""Proxmox's own rule for a node name: format `pve-node`, pve-common 9.2.1 (f665029)
src/PVE/JSONSchema.pm:319,347-355. Perl's `$` there also passes a trailing newline;
here the whole name must match."""
_DNS_LABEL = NODE_NAME.pattern
DNS_NAME = re.compile(rf"({_DNS_LABEL}\.)*{_DNS_LABEL}")
"""A container's hostname (its name in the cluster's resources): format `dns-name`,
pve-common 9.2.1 src/PVE/JSONSchema.pm:673-685, at most 255 characters
(pve-container 6.1.10 src/PVE/LXC/Config.pm:608-614)."""
DNS_NAME_MAX = 255


def node_name(value: str | None) -> str:
    """A node name pvesh reported, checked by Proxmox's rule before any use (a path
    of pvesh, a key of the inventory, a line on the screen); ValueError names it."""
    if not value or not NODE_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a Proxmox node name (letters, digits, '-')")
    return value


def host_name(value: str | None) -> str | None:
    """A container's name or hostname, kept only when Proxmox's rule allows it: any
    other text (newlines, escapes) is no name, and the container is named by its VMID."""
    if value and len(value) <= DNS_NAME_MAX and DNS_NAME.fullmatch(value):
        return value
    return None


@dataclass(frozen=True)
class Guest:
    """One entry of `pvesh get /cluster/resources --type vm`."""

    vmid: int
    node: str
    type: str  # lxc | qemu
    status: str
    name: str | None
    template: bool = False
    """A template: Proxmox never starts one (API2/LXC/Status.pm), so it is no target."""


@dataclass(frozen=True)
class NodeInfo:
    """One `type: node` entry of `pvesh get /cluster/status`: `ip` is the address the
    node's pmxcfs resolved its own name to, the one the other nodes reach it at."""

    name: str
    ip: str | None
    local: bool
    online: bool


@dataclass(frozen=True)
class GuestConfig:
    """What discovery needs of `pct config VMID --current` (the configuration that runs)."""

    hostname: str | None
    address: str | None
    """The first static IPv4 of net0..netN (else the first static IPv6), without its
    prefix length; or, once discovery has read them, the live address of a DHCP one."""
    address_note: str | None
    """Why there is no static address (dhcp, manual, no network), for the inventory's comment."""
    gpu_minors: tuple[int, ...]
    """N of each /dev/nvidiaN passed through, by devN or lxc.mount.entry."""
    interfaces: tuple[str, ...] = ()
    """The interface names (`name=`) of net0..netN, in that order."""
    template: bool = False


@dataclass(frozen=True)
class NodeGpu:
    index: int
    name: str
    memory_mib: int


def _json_list(what: str, text: str) -> list[dict]:
    with reading(what, text):
        data = remotejson.loads(text)
        if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
            raise ValueError("expected a JSON list of objects")
        return data


def _text(entry: dict, key: str) -> str | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key}: expected a string, got {value!r}")
    return value


def parse_resources(text: str) -> list[Guest]:
    """`pvesh get /cluster/resources --type vm --output-format json` -> guests by VMID."""
    guests = []
    with reading("pvesh's cluster resources", text):
        for entry in _json_list("pvesh's cluster resources", text):
            kind = _text(entry, "type")
            if kind not in ("lxc", "qemu"):
                continue
            vmid = entry.get("vmid")
            node = _text(entry, "node")
            if not isinstance(vmid, int) or not node:
                raise ValueError(f"{entry.get('id')!r}: a guest without vmid or node")
            node = node_name(node)
            status = _text(entry, "status") or "unknown"
            template = entry.get("template") == 1
            name = host_name(_text(entry, "name"))
            guests.append(Guest(vmid, node, kind, status, name, template))
    return sorted(guests, key=lambda g: g.vmid)


def parse_cluster_status(text: str) -> list[NodeInfo]:
    """`pvesh get /cluster/status --output-format json` -> the nodes (cluster entry skipped)."""
    nodes = []
    with reading("pvesh's cluster status", text):
        for entry in _json_list("pvesh's cluster status", text):
            if entry.get("type") != "node":
                continue
            name = node_name(_text(entry, "name"))
            ip = _text(entry, "ip")
            if ip is not None:
                ip = str(ipaddress.ip_address(ip))
            nodes.append(NodeInfo(name, ip, bool(entry.get("local")), bool(entry.get("online"))))
    return nodes


def property_string(value: str, default_key: str | None = None) -> dict[str, str]:
    """Proxmox's `key=value,key=value` (a leading bare value belongs to `default_key`)."""
    fields = {}
    for item in value.split(","):
        key, equals, item_value = item.partition("=")
        if equals:
            fields[key.strip()] = item_value.strip()
        elif default_key and item.strip():
            fields[default_key] = item.strip()
    return fields


def _static_address(ip: str) -> str | None:
    """`10.0.0.5/24` -> `10.0.0.5`; dhcp, auto, manual -> None."""
    try:
        return str(ipaddress.ip_interface(ip).ip)
    except ValueError:
        return None


def parse_guest_config(text: str) -> GuestConfig:
    """`pct config VMID --current`: `key: value` lines, sorted, then the raw `lxc.*` lines."""
    values: dict[str, str] = {}
    minors: list[int] = []
    with reading("pct config", text):
        for line in text.splitlines():
            key, colon, value = line.partition(":")
            if not colon or not key or key.startswith("#"):
                continue
            key, value = key.strip(), value.strip()
            if key == "lxc.mount.entry":
                device = NVIDIA_DEVICE.fullmatch(value.split()[0]) if value else None
            elif re.fullmatch(r"dev\d+", key):
                device = NVIDIA_DEVICE.fullmatch(property_string(value, "path").get("path", ""))
            else:
                values[key] = value
                continue
            if device and int(device.group(1)) not in minors:
                minors.append(int(device.group(1)))
    keys = sorted((k for k in values if re.fullmatch(r"net\d+", k)), key=lambda k: int(k[3:]))
    networks = {key: property_string(values[key]) for key in keys}
    settings = [
        (key, family, fields[family])
        for family in ("ip", "ip6")
        for key, fields in networks.items()
        if fields.get(family)
    ]
    static = [address for _, _, setting in settings if (address := _static_address(setting))]
    note = None if static else "no network interface (net0)"
    if settings and not static:
        key, family, setting = settings[0]
        shown = setting if setting.isprintable() else repr(setting)  # a comment's text
        note = f"{key} has {family}={shown}"
    return GuestConfig(
        host_name(values.get("hostname")),
        static[0] if static else None,
        note,
        tuple(minors),
        tuple(fields.get("name", "") for fields in networks.values()),
        values.get("template") == "1",
    )


def parse_interfaces(text: str, names: tuple[str, ...]) -> str | None:
    """`pvesh get /nodes/NODE/lxc/VMID/interfaces`: the first IPv4 of the named interfaces
    (in net0..netN order; `lo` is not one), else their first IPv6 that is not link-local;
    `null` (a stopped container) has none. Format: pve-container LXC.pm get_interfaces."""
    with reading("pvesh's container interfaces", text):
        data = remotejson.loads(text)
        if data is None:
            return None
        if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
            raise ValueError("expected a JSON list of objects or null")
        by_name = {entry.get("name"): entry.get("ip-addresses") or [] for entry in data}
        found = [
            (ip.get("ip-address-type"), ipaddress.ip_address(str(ip.get("ip-address"))))
            for name in names
            for ip in by_name.get(name, [])
            if isinstance(ip, dict)
        ]
    for family in ("inet", "inet6"):
        for kind, address in found:
            if kind == family and not address.is_link_local:
                return str(address)
    return None


def parse_node_gpus(text: str) -> list[NodeGpu]:
    """nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits."""
    with reading("nvidia-smi's GPU list", text):
        return [NodeGpu(int(i), name, int(total)) for i, name, total in parse_csv_rows(text)]


def parse_tool_paths(text: str) -> dict[str, str | None]:
    """`NAME PATH` lines (tool_paths) -> {name: path or None}."""
    paths: dict[str, str | None] = {}
    for line in text.splitlines():
        name, _, path = line.partition(" ")
        if name:
            paths[name] = path if path.startswith("/") else None
    return paths
