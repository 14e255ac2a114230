"""nvidia-smi's query and its parsers, on captured and malformed text."""

from __future__ import annotations

import pytest
from shelltools import (
    captured,
)

from orchestrator.container.gpu import (
    Gpu,
    GpuApp,
    gpu_query,
    parse_gpu_apps,
    parse_gpus,
)
from orchestrator.errors import NeedsAttention

GPU0 = "GPU-5f8f5b0c-2a7e-4b1d-9c3e-0d7a0c1e2f3a"
GPU1 = "GPU-9a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d"


def test_gpu_query_passes_the_path_as_one_argument() -> None:
    assert gpu_query("/opt/nv smi") == [
        "/opt/nv smi",
        "--query-gpu=index,uuid,memory.total,memory.used,memory.free,name",
        "--format=csv,noheader,nounits",
    ]


def test_gpus_from_nvidia_smi_csv() -> None:
    assert parse_gpus(captured("nvidia-smi-gpus.csv")) == [
        Gpu(0, GPU0, total_mib=49140, used_mib=45872, free_mib=2827, name="NVIDIA RTX A6000"),
        Gpu(1, GPU1, total_mib=49140, used_mib=1, free_mib=48598, name="NVIDIA RTX A6000"),
    ]
    assert parse_gpus("") == []


def test_gpu_apps_from_nvidia_smi_csv() -> None:
    assert parse_gpu_apps(captured("nvidia-smi-apps.csv")) == [
        GpuApp(pid=31337, used_mib=45296, gpu_uuid=GPU0),
        GpuApp(pid=4242, used_mib=512, gpu_uuid=GPU0),
    ]


@pytest.mark.parametrize("text", ["", "\n", "No running processes found\n"])
def test_no_gpu_apps(text: str) -> None:
    assert parse_gpu_apps(text) == []


@pytest.mark.parametrize(
    "text",
    [
        f"0, {GPU0}, 49140, [N/A], [N/A]\n",  # memory not reported (some container setups)
        "index, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n",  # header
        f"0, {GPU0}, 49140 MiB, 1 MiB, 48598 MiB\n",  # units
        f"0, {GPU0}, 49140\n",  # fewer columns than asked for
        f"0, {GPU0}, 49140, 1, 48598\n",  # no name: an older query's answer
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    ],
)
def test_unreadable_gpu_list_needs_attention(text: str) -> None:
    with pytest.raises(NeedsAttention, match="cannot read nvidia-smi's GPU list"):
        parse_gpus(text)


@pytest.mark.parametrize(
    "text",
    [
        f"31337, [N/A], {GPU0}\n",
        "31337, 45296\n",
        "pid, used_gpu_memory [MiB], gpu_uuid\n",
    ],
)
def test_unreadable_gpu_apps_need_attention(text: str) -> None:
    with pytest.raises(NeedsAttention, match="cannot read nvidia-smi's process list"):
        parse_gpu_apps(text)


def test_gpu_apps_with_their_process_names_a_comma_included() -> None:
    text = f"31337, 45296, {GPU0}, /usr/bin/python3\n4242, 512, {GPU0}, worker, rank 1\n"
    assert parse_gpu_apps(text) == [
        GpuApp(pid=31337, used_mib=45296, gpu_uuid=GPU0, name="/usr/bin/python3"),
        GpuApp(pid=4242, used_mib=512, gpu_uuid=GPU0, name="worker, rank 1"),
    ]
