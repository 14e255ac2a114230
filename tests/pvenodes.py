"""Proxmox VE nodes in memory, for driving discovery without a lab: each node is a
MemoryTransport answering `orchestrator.proxmox`'s builders by concern with recorded
output (tests/fixtures/proxmox), and `connect` logs in to them as discovery's
`NodeConnect` would, refusing the nodes a test makes unreachable."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import Unreachable
from orchestrator.inventory import SshSettings
from orchestrator.transport.base import Result
from orchestrator.transport.memory import MemoryTransport, reply

FIXTURES = Path(__file__).parent / "fixtures" / "proxmox"

ALL_TOOLS = "pvesh /usr/bin/pvesh\npct /usr/sbin/pct\nnvidia-smi /usr/bin/nvidia-smi\n"


def recorded(name: str) -> str:
    """A recorded output of a Proxmox tool."""
    return (FIXTURES / name).read_text()


@dataclass
class ScriptedNode:
    """One node: the cluster as its pvesh lists it, and its own containers' configs
    (pct reads only its own node's guests) and live interfaces, by VMID."""

    resources: str
    status: str | None
    """None: `pvesh get /cluster/status` fails (as for a login that is not root)."""
    configs: dict[int, str] = field(default_factory=dict)
    interfaces: dict[int, str] = field(default_factory=dict)
    gpus: str = ""
    tools: str = ALL_TOOLS
    refuse: dict[str, Result] = field(default_factory=dict)
    """A failure in place of a builder's output, by concern."""

    def transport(self, label: str) -> MemoryTransport:
        def by_vmid(texts: dict[int, str]) -> object:
            def answer(argv: Sequence[str], _stdin: bytes | None) -> Result:
                vmid = getattr(argv, "args", {})["vmid"]
                if vmid not in texts:
                    return Result(tuple(argv), 2, b"", f"CT {vmid} does not exist\n".encode())
                return Result(tuple(argv), 0, texts[vmid].encode(), b"")

            return answer

        transport = (
            MemoryTransport(label)
            .on("tool_paths", reply(self.tools))
            .on("cluster_resources", reply(self.resources))
            .on("cluster_status", reply(self.status or "", 0 if self.status is not None else 1))
            .on("guest_config", by_vmid(self.configs))  # type: ignore[arg-type]
            .on("guest_interfaces", by_vmid(self.interfaces))  # type: ignore[arg-type]
            .on("node_gpus", reply(self.gpus))
        )
        for concern, result in self.refuse.items():
            transport.on(concern, lambda argv, _stdin, result=result: result)
        return transport


@dataclass
class ScriptedCluster:
    """The nodes by address. A node in `behind_jump` answers only through a jump host;
    one in `down` (or at no address here) answers not at all."""

    nodes: dict[str, ScriptedNode]
    behind_jump: set[str] = field(default_factory=set)
    down: set[str] = field(default_factory=set)
    logins: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(name, address, jump) of every login, in order."""
    opened: list[MemoryTransport] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    """The nodes whose login discovery ended, in order."""

    @contextmanager
    def connect(self, name: str, address: str, login: SshSettings) -> Iterator[MemoryTransport]:
        self.logins.append((name, address, login.jump))
        node = self.nodes.get(address)
        if node is None or address in self.down or (address in self.behind_jump and not login.jump):
            raise Unreachable(name, f"connect {address}:22", "connection refused")
        transport = node.transport(name)
        self.opened.append(transport)
        yield transport
        self.closed.append(name)
