"""Parsers for what read-only commands print: pure, tested on captured text.

Output that does not parse is never a traceback: it is `NeedsAttention`,
naming what was being read and showing the start of the text.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from orchestrator.errors import NeedsAttention


@contextmanager
def reading(what: str, text: str | bytes) -> Iterator[None]:
    try:
        yield
    except (ValueError, IndexError, TypeError, AttributeError) as exc:
        raise NeedsAttention(f"cannot read {what}: {exc}: {text[:200]!r}") from None


def parse_frames(data: bytes) -> dict[str, bytes]:
    """Split `NAME LENGTH\\n` + bytes frames (see commands.read_model_dir)."""
    frames: dict[str, bytes] = {}
    position = 0
    with reading("framed file contents", data[position : position + 200]):
        while position < len(data):
            end = data.index(b"\n", position)
            name, length = data[position:end].decode().rsplit(" ", 1)
            start, size = end + 1, int(length)
            if size < 0 or start + size > len(data):
                raise ValueError(f"{name}: {size} bytes announced, {len(data) - start} present")
            frames[name] = data[start : start + size]
            position = start + size
    return frames


def parse_listing(text: str) -> dict[str, int]:
    """`SIZE NAME` lines -> {name: size}."""
    sizes = {}
    with reading("a file listing", text):
        for line in text.splitlines():
            size, _, name = line.partition(" ")
            if name:
                sizes[name] = int(size)
    return sizes


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    total_mib: int
    used_mib: int
    free_mib: int


@dataclass(frozen=True)
class GpuApp:
    pid: int
    used_mib: int
    gpu_uuid: str


def parse_csv_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in row] for row in csv.reader(io.StringIO(text)) if row]


def parse_gpus(text: str) -> list[Gpu]:
    """nvidia-smi --query-gpu=index,uuid,memory.total,memory.used,memory.free (noheader,nounits)."""
    with reading("nvidia-smi's GPU list", text):
        return [
            Gpu(int(i), u, int(t), int(used), int(f)) for i, u, t, used, f in parse_csv_rows(text)
        ]


def parse_gpu_apps(text: str) -> list[GpuApp]:
    """nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid (noheader,nounits)."""
    if "No running processes found" in text:
        return []
    with reading("nvidia-smi's process list", text):
        return [GpuApp(int(p), int(m), u) for p, m, u in parse_csv_rows(text)]


@dataclass(frozen=True)
class ServerState:
    """What the recorded PID file says: `running`, `stopped` (recorded but gone) or `none`."""

    status: str
    pid: int | None = None

    @property
    def running(self) -> bool:
        return self.status == "running"


def parse_server_state(text: str) -> ServerState:
    words = text.split()
    if words[:1] == ["none"] or not words:
        return ServerState("none")
    with reading("the server state", text):
        return ServerState(words[0], int(words[1]))


def parse_started(text: str) -> tuple[int, int]:
    """What commands.start_server prints -> (PID, log size before the start)."""
    with reading("the started server's PID", text):
        pid, _, log_start = text.split()
        return int(pid), int(log_start)


@dataclass(frozen=True)
class LogRead:
    """What commands.read_log printed: `mode` is `more`, `tail` or `none`."""

    mode: str
    identity: str = ""
    size: int = 0
    path: str = ""
    data: bytes = b""


def parse_log_read(output: bytes) -> LogRead:
    with reading("a server log read", output):
        head, _, data = output.partition(b"\n")
        if head == b"none":
            return LogRead("none")
        mode, identity, size, path = head.decode("utf-8", "replace").split(" ", 3)
        if mode not in ("more", "tail"):
            raise ValueError(f"unknown mode {mode!r}")
        return LogRead(mode, identity, int(size), path, data)


def release_id_of(link_target: str) -> str | None:
    """`releases/ab12cd` (what `readlink current` prints) -> `ab12cd`; nothing -> None."""
    return link_target.strip().rsplit("/", 1)[-1] or None


def parse_release_list(text: str) -> list[str]:
    """`MTIME ID` lines (commands.list_releases) -> ids, oldest first."""
    with reading("the release list", text):
        return [line.split()[1] for line in text.splitlines() if line.strip()]


def parse_status_report(text: str) -> dict[str, object]:
    """What commands.status_report prints, as a status row."""
    with reading("the status report", text):
        fields = dict(line.partition(" ")[::2] for line in text.splitlines())
        server = fields.get("server", "none").split()
        audit = json.loads(fields["audit"]) if fields.get("audit") else {}
        gated = json.loads(fields["gated"]) if fields.get("gated") else audit
        return {
            "release": release_id_of(fields.get("current", "")),
            "server": server[0],
            "pid": int(server[1]) if len(server) > 1 else None,
            "last_result": audit.get("result"),
            "last_verdict": gated.get("verdict"),
            "last_mean_length": gated.get("mean_acceptance_length"),
            "lock": fields.get("lock") or None,
        }


def parse_container_status(text: str) -> str:
    """`pct status VMID` -> `running`, `stopped`, ... (pct prints `status: WORD`)."""
    with reading("pct status", text):
        label, word = text.split(":", 1)
        if label.strip() != "status":
            raise ValueError("expected 'status: ...'")
        return word.strip()


def parse_sshd_limits(text: str) -> dict[str, str]:
    """`sshd -T` lines kept by commands.sshd_limits -> {maxsessions: "10", ...}."""
    return {
        key.lower(): value.strip()
        for key, _, value in (line.partition(" ") for line in text.splitlines())
        if value
    }


_VERSION_LINE = re.compile(r"v?(\d+(?:\.\d+)+\S*)")


def parse_vllm_version(text: str, exit_code: str) -> tuple[str | None, str]:
    """What the version probe printed -> (version, "") or (None, why it is unknown).

    The last line that is a version wins: `vllm --version` may log before it."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if exit_code == "0":
        for line in reversed(lines):
            if match := _VERSION_LINE.fullmatch(line):
                return match.group(1), ""
    detail = lines[-1][:200] if lines else "no output"
    return (
        None,
        f"'vllm --version' and the package metadata gave no version (exit {exit_code}: {detail})",
    )
