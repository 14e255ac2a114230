"""Discovery's runner: the commands of `proxmox` over one connection per Proxmox node
(the node asked first, then each other member it names), each opened by the `connect`
it is given (`ssh_nodes` on the command line, memory in tests); parsing is elsewhere."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from pydantic import ValidationError

from orchestrator import proxmox
from orchestrator.container.shell import run_step
from orchestrator.discovery.writer import (
    DEFAULT_PCT,
    NAME,
    Cluster,
    FoundContainer,
    NodeRead,
    NotRead,
    container_names,
)
from orchestrator.documents.inventory import (
    DiscoveredContainer,
    DiscoveredNode,
    Inventory,
    UnreadNode,
)
from orchestrator.errors import (
    HostKeyError,
    InputError,
    NeedsAttention,
    StepFailed,
    TransportError,
    Unreachable,
)
from orchestrator.inventory import Host, SshSettings
from orchestrator.proxmox import (
    Guest,
    GuestConfig,
    NodeInfo,
    parse_cluster_status,
    parse_guest_config,
    parse_interfaces,
    parse_node_gpus,
    parse_resources,
    parse_tool_paths,
)
from orchestrator.transport.base import Transport
from orchestrator.transport.pct import NOT_ROOT
from orchestrator.transport.ssh import SshTransport

NodeConnect = Callable[[str, str, SshSettings], AbstractContextManager[Transport]]
"""A login to one Proxmox node: (name, address, login) -> its transport, for as long as
discovery reads the node."""


def ssh_nodes(accept_new_host_keys: bool = False) -> NodeConnect:
    """Each node over SSH, with the transport's host-key rules."""

    @contextmanager
    def connect(name: str, address: str, login: SshSettings) -> Iterator[Transport]:
        host = SshTransport(name, address, login, accept_new_host_keys)
        try:
            yield host
        finally:
            host.close()

    return connect


def discover(address: str, login: SshSettings, connect: NodeConnect) -> Cluster:
    """Read the cluster through `address`: its members and guests, then each node's
    containers on that node, with the same login (through `address` as jump host for a
    node that cannot be reached directly)."""
    if login.identity_file and not os.access(Path(login.identity_file).expanduser(), os.R_OK):
        raise InputError(f"--identity-file: cannot read {login.identity_file}")
    with connect(address, address, login) as host:
        return _read_cluster(host, address, login, connect)


def _read_cluster(
    host: Transport, address: str, login: SshSettings, connect: NodeConnect
) -> Cluster:
    tools = _tool_paths(host)
    pvesh = tools.get("pvesh")
    if pvesh is None:
        raise NeedsAttention(
            f"{address}: no pvesh on the login's PATH: is this a Proxmox VE host? "
            "(log in as root, or as a user whose PATH has /usr/bin)"
        )
    try:
        listing = run_step(host, proxmox.cluster_resources(pvesh), "listing the cluster's guests")
    except StepFailed as exc:
        if not NOT_ROOT.search(exc.message):
            raise
        raise NeedsAttention(
            f"{address}: pvesh and pct need root (pvesh: please run as root): "
            "log in as root (--user root), or add --become sudo"
        ) from None
    guests = parse_resources(listing.text)
    status = host.run(proxmox.cluster_status(pvesh), timeout=60)
    nodes = parse_cluster_status(status.text) if status.ok else []
    name = _local_node(address, nodes, {g.node for g in guests})
    read = [_read_node(host, tools, name, address, guests)]
    unread: dict[str, NotRead] = {}
    via = None if login.jump else jump_through(address, login)
    for node in sorted(nodes, key=lambda n: n.name):
        if node.name == name:
            continue
        outcome = _read_other(node, login, via, connect, guests)
        if isinstance(outcome, NotRead):
            unread[node.name] = outcome
        else:
            read.append(outcome)
    done = {node.name for node in read}
    return Cluster(
        address=address,
        read=read,
        nodes=nodes,
        unread=unread,
        elsewhere=[g for g in guests if g.node not in done and g.type == "lxc"],
        vms=[g for g in guests if g.type == "qemu"],
    )


def _tool_paths(host: Transport) -> dict[str, str | None]:
    return parse_tool_paths(run_step(host, proxmox.tool_paths(), "finding pvesh and pct").text)


def _read_node(
    host: Transport,
    tools: dict[str, str | None],
    name: str,
    address: str,
    guests: list[Guest],
    jump: str | None = None,
) -> NodeRead:
    """A node's containers (configuration as it runs, live address of a DHCP one) and
    GPUs, read on that node: pct reads only its own node's guests.

    A template is left out when either says so: `/cluster/resources` (whose `template`
    comes from the guest's RRD data, absent until the node has sampled it: pve-manager
    9.2.11 PVE/API2Tools.pm:95-100, called by PVE/API2/Cluster.pm:560), or the
    `template: 1` of its own configuration."""
    pct = tools.get("pct") or DEFAULT_PCT
    pvesh = tools.get("pvesh") or "pvesh"
    here = [g for g in guests if g.node == name and g.type == "lxc"]
    configured = [
        FoundContainer(guest, _running_config(host, pct, pvesh, guest))
        for guest in here
        if not guest.template
    ]
    containers = [found for found in configured if not found.config.template]
    by_config = {found.guest.vmid for found in configured if found.config.template}
    nvidia_smi = tools.get("nvidia-smi")
    node_gpus = (
        parse_node_gpus(run_step(host, proxmox.node_gpus(nvidia_smi), "listing GPUs").text)
        if nvidia_smi
        else None
    )
    templates = [g for g in here if g.template or g.vmid in by_config]
    return NodeRead(name, address, tools.get("pct"), containers, node_gpus, templates, jump)


def _read_other(
    node: NodeInfo,
    login: SshSettings,
    via: str | None,
    connect: NodeConnect,
    guests: list[Guest],
) -> NodeRead | NotRead:
    """Another node, logged in to at its cluster IP directly, else through `via`."""
    if not node.online:
        return NotRead("offline in the cluster's status", "pvesh get /cluster/status: online 0")
    if node.ip is None:
        return NotRead("no ip in the cluster's status", "pvesh get /cluster/status: no ip")
    try:
        return _read_node_at(node.name, node.ip, login, connect, guests)
    except Unreachable as direct:
        if via is None:
            return NotRead("no SSH connection to it", direct.message_for(node.name))
        try:
            return _read_node_at(node.name, node.ip, login, connect, guests, via)
        except NeedsAttention as exc:
            detail = f"directly: {direct.message_for(node.name)}\nthrough {via}: "
            return NotRead(
                _summary(exc) + " (directly or through the first node)",
                detail + exc.message_for(node.name),
            )
    except NeedsAttention as exc:
        return NotRead(_summary(exc), exc.message_for(node.name))


def _read_node_at(
    name: str,
    address: str,
    login: SshSettings,
    connect: NodeConnect,
    guests: list[Guest],
    jump: str | None = None,
) -> NodeRead:
    settings = login.model_copy(update={"jump": jump}) if jump else login
    with connect(name, address, settings) as host:
        return _read_node(host, _tool_paths(host), name, address, guests, jump)


def _summary(exc: NeedsAttention) -> str:
    """Why a node was not read, in fixed words (the inventory's comment)."""
    if isinstance(exc, Unreachable):
        return "no SSH connection to it"
    if isinstance(exc, HostKeyError):
        return "its host key was refused"
    if isinstance(exc, TransportError):
        return "the SSH login failed"
    return "a command failed there"


def jump_through(address: str, login: SshSettings) -> str:
    """The node discovery began at as a jump host, `[user@]host[:port]`, with its login."""
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    user = f"{login.user}@" if login.user else ""
    port = f":{login.port}" if login.port else ""
    return f"{user}{host}{port}"


def _running_config(host: Transport, pct: str, pvesh: str, guest: Guest) -> GuestConfig:
    """The container's configuration as it runs; a DHCP (or `manual`) one's address is
    its live one, when it is running and has one."""
    config = parse_guest_config(
        run_step(host, proxmox.guest_config(pct, guest.vmid), f"pct config {guest.vmid}").text
    )
    if config.address or guest.status != "running" or not config.interfaces:
        return config
    live = run_step(
        host,
        proxmox.guest_interfaces(pvesh, guest.node, guest.vmid),
        f"reading the live addresses of {guest.vmid}",
    )
    address = parse_interfaces(live.text, config.interfaces)
    return dataclasses.replace(config, address=address) if address else config


def _local_node(address: str, nodes: list[NodeInfo], guest_nodes: set[str]) -> str:
    """The node answering: `local` in the cluster status, else the only node with guests."""
    local = [n.name for n in nodes if n.local]
    candidates = local or (sorted(guest_nodes) if len(guest_nodes) == 1 else [])
    if not candidates:
        raise NeedsAttention(
            f"{address}: cannot tell which node answers (pvesh get /cluster/status failed "
            "and the guests are on several nodes); log in as root"
        )
    if not NAME.match(candidates[0]):
        raise NeedsAttention(f"{address}: the node name {candidates[0]!r} is not usable here")
    return candidates[0]


def write_new(path: Path, text: str, force: bool = False) -> None:
    """Create the file; replace an existing one (whole: temp file, rename) only with `force`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not force:
        try:
            with path.open("x", encoding="utf-8") as file:
                file.write(text)
            return
        except FileExistsError:
            raise InputError(
                f"{path} exists: choose another -o, or replace it with --force"
            ) from None
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
    ) as temporary:
        temporary.write(text)
    os.replace(temporary.name, path)


def login_settings(address: str, options: dict[str, object]) -> SshSettings:
    """The command line's login (`--port`, `--user`, ... as keys), checked as an
    inventory's would be; file paths are made absolute."""
    fields = {
        key: str(value.resolve()) if isinstance(value, Path) else value
        for key, value in options.items()
        if value is not None
    }
    try:
        host = Host.model_validate({"address": address, **fields})
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]
        option = "--" + str(problem["loc"][0]).replace("_", "-")
        raise InputError(f"{option}: {problem['msg'].removeprefix('Value error, ')}") from None
    return SshSettings(**host.model_dump(exclude={"address", "pct_path"}))


def discovered_document(cluster: Cluster, output: Path | None, text: str) -> Inventory:
    """`orch inventory discover --json`: the nodes read and not read, the containers
    found, and the inventory written (its text when it was printed rather than written)."""
    found = zip(container_names(cluster.containers), cluster.containers, strict=True)
    return Inventory(
        result="needs_attention" if cluster.unread else "ok",
        node=cluster.node,
        address=cluster.address,
        nodes=[
            DiscoveredNode(name=node.name, address=node.address, jump=node.jump)
            for node in cluster.read
        ],
        unread=[
            UnreadNode(name=name, reason=why.summary, detail=why.detail)
            for name, why in cluster.unread.items()
        ],
        output=str(output) if output else None,
        inventory=None if output else text,
        targets=[
            DiscoveredContainer(
                name=name,
                vmid=c.guest.vmid,
                host=c.guest.node,
                status=c.guest.status,
                address=c.config.address,
                gpus=list(c.config.gpu_minors),
            )
            for name, c in found
        ],
    )
