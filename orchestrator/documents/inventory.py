"""The documents of the commands that write an inventory: `orch inventory discover`
from a Proxmox cluster and `orch inventory import ansible` from Ansible's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from orchestrator.contract import Document, RunResult

if TYPE_CHECKING:
    from orchestrator.ansible.convert import Imported


class DiscoveredNode(BaseModel):
    """A node of the cluster discovery logged in to (through `jump` when only so)."""

    name: str
    address: str
    jump: str | None


class UnreadNode(BaseModel):
    """A node of the cluster discovery did not read, and why."""

    name: str
    reason: str
    detail: str


class DiscoveredContainer(BaseModel):
    name: str
    vmid: int
    host: str
    status: str
    address: str | None
    gpus: list[int]


class Inventory(Document):
    """`orch inventory discover --json`: the nodes read and not read, the containers
    found, and the inventory written (its text when it was printed rather than written)."""

    kind: Literal["Inventory"] = "Inventory"
    result: RunResult
    """`needs_attention` when a node was not read (exit 3)."""
    node: str
    address: str
    nodes: list[DiscoveredNode]
    unread: list[UnreadNode]
    output: str | None
    inventory: str | None
    targets: list[DiscoveredContainer]


class InventoryImport(Document):
    kind: Literal["InventoryImport"] = "InventoryImport"
    result: RunResult = "ok"
    source: str
    output: str | None
    inventory: str | None
    """The inventory's text when it was printed rather than written."""
    hosts: list[str]
    groups: list[str]
    not_mapped: list[str]
    targets: list[dict[str, Any]]
    """Each container as the inventory writes it: its keys are the inventory's own."""

    @classmethod
    def of(cls, source: Path, output: Path | None, imported: Imported) -> InventoryImport:
        """The inventory `source` converted to (its text when it was not written)."""
        return cls(
            source=str(source),
            output=str(output) if output else None,
            inventory=None if output else imported.text,
            hosts=imported.hosts,
            groups=imported.groups,
            not_mapped=imported.notes,
            targets=imported.containers,
        )
