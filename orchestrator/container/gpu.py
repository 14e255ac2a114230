"""The container's GPUs as nvidia-smi reports them: the queries, their parsers, and
the wait for an old server's GPU memory to come free."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.container.shell import builder, parse_csv_rows, reading
from orchestrator.deadline import SYSTEM_CLOCK, Clock, Deadline
from orchestrator.errors import NeedsAttention
from orchestrator.transport.base import Transport

DEFAULT_NVIDIA_SMI = "/usr/bin/nvidia-smi"
"""Where a container's nvidia-smi is unless the inventory's `nvidia_smi` var says."""

GPU_QUERY = (
    "--query-gpu=index,uuid,memory.total,memory.used,memory.free,name",
    "--format=csv,noheader,nounits",
)
"""The name last: nvidia-smi does not quote it (the speed baseline's fingerprint names
the GPUs by it)."""
GPU_APPS_QUERY = (
    "--query-compute-apps=pid,used_memory,gpu_uuid,process_name",
    "--format=csv,noheader,nounits",
)
"""The process name last: nvidia-smi does not quote it, and it may hold a comma."""


@builder
def gpu_query(nvidia_smi: str) -> list[str]:
    return [nvidia_smi, *GPU_QUERY]


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    total_mib: int
    used_mib: int
    free_mib: int
    name: str = ""


@dataclass(frozen=True)
class GpuApp:
    pid: int
    used_mib: int
    gpu_uuid: str
    name: str = ""


def parse_gpus(text: str) -> list[Gpu]:
    """nvidia-smi --query-gpu=index,uuid,memory.total,memory.used,memory.free,name
    (noheader,nounits)."""
    with reading("nvidia-smi's GPU list", text):
        return [_gpu(row) for row in parse_csv_rows(text)]


def _gpu(row: list[str]) -> Gpu:
    index, uuid, total, used, free, *name = row
    if not name:
        raise ValueError("no name column")
    return Gpu(int(index), uuid, int(total), int(used), int(free), ", ".join(name))


def parse_gpu_apps(text: str) -> list[GpuApp]:
    """nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid,process_name (noheader,
    nounits)."""
    if "No running processes found" in text:
        return []
    with reading("nvidia-smi's process list", text):
        return [GpuApp(int(p), int(m), u, ", ".join(n)) for p, m, u, *n in parse_csv_rows(text)]


def wait_free(
    transport: Transport,
    nvidia_smi: str,
    gpus: int,
    share: float,
    timeout: float,
    tick: Callable[[str], None] = lambda _: None,
    clock: Clock = SYSTEM_CLOCK,
) -> None:
    """Until each of the first `gpus` GPUs has `share` of its memory free; `tick`
    hears, at every look that finds too little, what each short GPU has free.

    Judged by memory, not by PIDs: inside an LXC container nvidia-smi may show
    the host's PIDs, or none, for the old server's workers.
    """
    deadline = Deadline.after(timeout, clock=clock)
    while True:
        result = transport.run(gpu_query(nvidia_smi), timeout=deadline.limit(30))
        if not result.ok:
            return  # no GPU facts to wait on; preflight has reported it
        short = [g for g in parse_gpus(result.text)[:gpus] if g.free_mib < share * g.total_mib]
        if not short:
            return
        held = ", ".join(f"GPU {g.index}: {g.free_mib} of {g.total_mib} MiB free" for g in short)
        tick(held)
        if deadline.expired():
            raise NeedsAttention(
                f"GPU memory not released {timeout:.0f} s after the old server stopped ({held})"
            )
        deadline.pause(0.5)
