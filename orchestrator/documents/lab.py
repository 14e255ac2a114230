"""The documents of `orch lab`: the local cluster of stand-ins brought up, down, and
as it stands."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from orchestrator.contract import Document, RunResult


class LabUp(Document):
    kind: Literal["LabUp"] = "LabUp"
    result: RunResult = "ok"
    started: bool
    """False when the lab was already running."""
    dir: str
    inventory: str
    server: str
    """What serves in the containers: `standin` or `vllm` (the real one)."""
    vllm_version: str


class LabDown(Document):
    kind: Literal["LabDown"] = "LabDown"
    result: RunResult = "ok"
    dir: str
    stopped: list[int]
    """The PIDs stopped."""


class LabTarget(BaseModel):
    """A container of the lab as `orch lab status` lists it."""

    name: str
    vmid: int
    host: str
    access: str
    ssh: str
    """The address and port of the sshd it is reached by (its own, or its host's)."""
    sshd_up: bool
    status: str
    servers: list[int]
    """The PIDs of the servers running in it."""


class LabStatus(Document):
    kind: Literal["LabStatus"] = "LabStatus"
    result: RunResult = "ok"
    dir: str
    server: str
    vllm_version: str
    targets: list[LabTarget]
