"""Parsers of what the read-only commands print, on captured text and on malformed text."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.errors import NeedsAttention
from orchestrator.facts import (
    Gpu,
    GpuApp,
    ServerState,
    parse_frames,
    parse_gpu_apps,
    parse_gpus,
    parse_listing,
    parse_release_list,
    parse_server_state,
    parse_status_report,
    release_id_of,
)

FIXTURES = Path(__file__).parent / "fixtures" / "commands"
GPU0 = "GPU-5f8f5b0c-2a7e-4b1d-9c3e-0d7a0c1e2f3a"
GPU1 = "GPU-9a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d"


def captured(name: str) -> str:
    return (FIXTURES / name).read_text()


def frame(name: str, data: bytes) -> bytes:
    return f"{name} {len(data)}\n".encode() + data


# -- nvidia-smi ----------------------------------------------------------------------------------


def test_gpus_from_nvidia_smi_csv() -> None:
    assert parse_gpus(captured("nvidia-smi-gpus.csv")) == [
        Gpu(index=0, uuid=GPU0, total_mib=49140, used_mib=45872, free_mib=2827),
        Gpu(index=1, uuid=GPU1, total_mib=49140, used_mib=1, free_mib=48598),
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


# -- server state and status report --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("running 31337\n", ServerState("running", 31337)),
        ("stopped 31337\n", ServerState("stopped", 31337)),
        ("none\n", ServerState("none")),
        ("", ServerState("none")),
    ],
)
def test_server_state(text: str, state: ServerState) -> None:
    assert parse_server_state(text) == state
    assert parse_server_state(text).running == (state.status == "running")


def test_status_report_as_a_row() -> None:
    assert parse_status_report(captured("status-report.txt")) == {
        "release": "0123456789ab",
        "server": "running",
        "pid": 31337,
        "last_run": {
            "run_id": "20250101T110000-cd34",
            "time": "2025-01-01T11:05:00+00:00",
            "action": "deploy",
            "result": "deployed",
            "verdict": "pass",
            "mean_acceptance_length": 4.12,
        },
        "lock": '{"run_id": "20250101T120000-ab12", "user": "ops", "control_host": "laptop"}',
    }


def test_status_report_of_a_container_never_deployed() -> None:
    assert parse_status_report(captured("status-report-empty.txt")) == {
        "release": None,
        "server": "none",
        "pid": None,
        "last_run": None,
        "lock": None,
    }


# -- listings and frames -------------------------------------------------------------------------


def test_listing_keeps_names_with_spaces_and_skips_blank_lines() -> None:
    text = "2 config.json\n17179869184 model-00001.safetensors\n\n3 notes with spaces.txt\n"
    assert parse_listing(text) == {
        "config.json": 2,
        "model-00001.safetensors": 17179869184,
        "notes with spaces.txt": 3,
    }


def test_frames_hold_any_bytes_one_after_another() -> None:
    data = (
        frame("/d/a b/config.json", b'{"a": 1}\n')
        + frame("empty", b"")
        + frame("bin 42", b"\n12 x\n\x00\xff")
    )
    assert parse_frames(data) == {
        "/d/a b/config.json": b'{"a": 1}\n',
        "empty": b"",
        "bin 42": b"\n12 x\n\x00\xff",
    }
    assert parse_frames(b"") == {}


@given(st.dictionaries(st.text(st.characters(codec="utf-8", exclude_characters="\n")), st.binary()))
def test_frames_round_trip(files: dict[str, bytes]) -> None:
    assert parse_frames(b"".join(frame(name, data) for name, data in files.items())) == files


# -- malformed output must become NeedsAttention, never a traceback ------------------------------


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        pytest.param(
            parse_server_state,
            "stopped \n",
            id="server-state-without-pid",
        ),
        pytest.param(
            parse_server_state,
            "running 31337x\n",
            id="server-state-bad-pid",
        ),
        pytest.param(
            parse_status_report,
            captured("status-report.txt").replace('"verdict": "pass"}', '"verd'),
            id="status-report-truncated-audit",
        ),
        pytest.param(
            parse_listing,
            "2 config.json\nx2 model.safetensors\n",
            id="listing-bad-size",
        ),
    ],
)
def test_malformed_text_needs_attention(parse: object, text: str) -> None:
    with pytest.raises(NeedsAttention):
        parse(text)  # type: ignore[operator]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            frame("config.json", b"{}")[:-1],
            id="cut-off-frame",
        ),
        pytest.param(
            b"config.json\n{}",
            id="no-length",
        ),
        pytest.param(
            frame("config.json", b"{}") + b"garbage without a newline",
            id="trailing-garbage",
        ),
    ],
)
def test_malformed_frames_need_attention(data: bytes) -> None:
    with pytest.raises(NeedsAttention):
        parse_frames(data)


def test_release_id_of_a_link_target() -> None:
    assert release_id_of("releases/ab12cd34ef56\n") == "ab12cd34ef56"
    assert release_id_of("") is None
    assert release_id_of("\n") is None


def test_release_list_is_ids_oldest_first() -> None:
    assert parse_release_list("1700000000 aaa\n1700000100 bbb\n\n") == ["aaa", "bbb"]
    assert parse_release_list("") == []
    with pytest.raises(NeedsAttention, match="release list"):
        parse_release_list("1700000000\n")
