"""Preflight's read-only probes of a container: everything it reads in one round trip
(both model dirs, the small facts: GPUs, GPU processes, free disk, the recorded server,
the current release, other deployments' servers; the server check's kept verdict), and
the pieces others read alone (a model dir, the small facts, the vLLM version)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator import remotejson
from orchestrator.container import verdict
from orchestrator.container.gpu import GPU_APPS_QUERY, GPU_QUERY
from orchestrator.container.shell import (
    FRAME_FUNCTIONS,
    PROCESS_FUNCTIONS,
    builder,
    q,
    reading,
    script,
)
from orchestrator.layout import Layout

# The server's version: `vllm --version`, else the package metadata of the Python
# beside the vllm command (a venv's bin/), as importlib.metadata reads it.
_VERSION_FUNCTION = """\
vllm_version() { "$1" --version 2>/dev/null || "${1%/*}/python" -c \
'import importlib.metadata as m; print(m.version("vllm"))'; }
"""


def _model_dir(directory: str, names: Sequence[str], header_limit: int, prefix: str) -> str:
    """sh framing a model directory, each frame's name after `prefix`: the listing
    (`.listing`: `SIZE NAME` lines), each of `names` that exists, and the header prefix
    (8 + N bytes) of every *.safetensors file. In a subshell that exits 3: no such dir."""
    wanted = " ".join(q(n) for n in names)
    p = q(prefix)
    return (
        f"( cd {q(directory)} || exit 3\n"
        "find -L . -maxdepth 1 -type f -printf '%s %P\\n' | sort -k2 > \"$tmp\"; "
        f'frame {p}.listing "$tmp"\n'
        f'for n in {wanted}; do [ -f "$n" ] && frame {p}"$n" "$n"; done\n'
        'for f in *.safetensors; do [ -f "$f" ] || continue\n'
        "  n=$(head -c 8 \"$f\" | od -An -tu8 | tr -d ' ')\n"
        f'  [ -n "$n" ] && [ "$n" -le {int(header_limit)} ] || n=0\n'
        f'  head -c $((8 + n)) "$f" > "$tmp"; frame {p}"$f" "$tmp"\n'
        "done\n)"
    )


@builder
def read_model_dir(directory: str, names: Sequence[str], header_limit: int) -> list[str]:
    """One round trip for a model directory, as frames `NAME LENGTH\\n` + bytes (see
    _model_dir). Exit 3: no such dir."""
    return script(FRAME_FUNCTIONS + _model_dir(directory, names, header_limit, "") + "\n")


MISSING = ".missing"
"""The frame (after a model dir's prefix) that says the directory does not exist."""


def _siblings(layout: Layout) -> str:
    """sh framing each other deployment under the state dir whose recorded server runs:
    `sibling NAME` (`running PID`) and `sibling-manifest NAME` (its current manifest)."""
    return (
        f"for d in {q(layout.state_dir.rstrip('/'))}/*/; do n=${{d%/}}; n=${{n##*/}}\n"
        f'  [ "$n" = {q(layout.name)} ] && continue\n'
        '  recorded "$d/server.pid" > "$tmp"; grep -q "^running" "$tmp" || continue\n'
        '  frame "sibling $n" "$tmp"\n'
        '  m="$d/current/manifest.json"; [ -f "$m" ] && frame "sibling-manifest $n" "$m"\n'
        "done\n"
    )


@dataclass(frozen=True)
class Sibling:
    """Another orch playbook's deployment on the container whose server runs."""

    name: str
    pid: int
    port: int | None
    """The port its current release serves on, from its manifest (None: not recorded)."""


def parse_siblings(frames: dict[str, bytes]) -> list[Sibling]:
    found = []
    for key, data in frames.items():
        kind, _, name = key.partition(" ")
        if kind != "sibling":
            continue
        with reading("another deployment's server", data):
            pid = int(data.split()[1])
        found.append(Sibling(name, pid, _manifest_port(frames.get(f"sibling-manifest {name}"))))
    return sorted(found, key=lambda s: s.name)


def _manifest_port(raw: bytes | None) -> int | None:
    try:
        return int(remotejson.loads(raw or b"null")["gate_target"]["port"])
    except (ValueError, TypeError, KeyError):
        return None


@builder
def read_vllm_version(vllm: str) -> list[str]:
    """The version `vllm` reports, else its package metadata's (see _VERSION_FUNCTION):
    each imports vLLM, seconds of CPU."""
    return script(_VERSION_FUNCTION + f"vllm_version {q(vllm)} 2>&1\n")


def _small_facts(layout: Layout, nvidia_smi: str) -> str:
    """sh framing `gpus` and `apps` with their `.rc`, `disk` (free KiB where the
    deployment goes), `server`, `current`, and the running servers of other
    deployments beside this one (see _siblings)."""
    return (
        f"capture gpus {shlex.join([nvidia_smi, *GPU_QUERY])}\n"
        + f"capture apps {shlex.join([nvidia_smi, *GPU_APPS_QUERY])}\n"
        + f'p={q(layout.root)}; while [ ! -e "$p" ]; do p=${{p%/*}}; [ -n "$p" ] || p=/; done\n'
        + 'df -Pk "$p" | awk \'NR==2 {print $4}\' > "$tmp"; frame disk "$tmp"\n'
        + f'recorded {q(layout.server_pid)} > "$tmp"; frame server "$tmp"\n'
        + f'readlink {q(layout.current)} > "$tmp" 2>/dev/null; frame current "$tmp"\n'
        + _siblings(layout)
    )


@builder
def target_facts(layout: Layout, nvidia_smi: str) -> list[str]:
    """The small facts in one round trip, as frames (see _small_facts)."""
    return script(PROCESS_FUNCTIONS + FRAME_FUNCTIONS + _small_facts(layout, nvidia_smi))


TARGET, DRAFTER = "target/", "drafter/"
"""The prefixes of the two model dirs' frames in preflight_facts."""


@dataclass(frozen=True)
class LaunchRead:
    """What a launch's read covers: its model dirs (the drafter's, if any), the files of
    each read whole (`names`) and the header bytes taken of each weight file, and the
    launch's `vllm`, whose kept verdict and install identity come too (None: no
    `vllm serve`, no server check)."""

    target_dir: str
    drafter_dir: str | None
    names: Sequence[str]
    header_limit: int
    vllm: str | None

    def model_dirs(self) -> list[tuple[str, str]]:
        """The model dirs it frames, in order, each with its frames' prefix."""
        drafter = [(DRAFTER, self.drafter_dir)] if self.drafter_dir else []
        return [(TARGET, self.target_dir), *drafter]


@builder
def preflight_facts(layout: Layout, nvidia_smi: str, read: LaunchRead) -> list[str]:
    """Everything preflight reads, in one round trip: the small facts (_small_facts),
    then the launch's model dirs and kept verdict (_launch)."""
    return script(
        PROCESS_FUNCTIONS
        + FRAME_FUNCTIONS
        + _small_facts(layout, nvidia_smi)
        + _launch(layout, read)
    )


@builder
def launch_facts(layout: Layout, read: LaunchRead) -> list[str]:
    """What the checks of a release already on the container read, in one round trip:
    the launch's model dirs and kept verdict, as preflight_facts frames them (_launch)."""
    return script(FRAME_FUNCTIONS + _launch(layout, read))


def _launch(layout: Layout, read: LaunchRead) -> str:
    """sh framing the target's and the drafter's model dirs (frames named after TARGET
    and DRAFTER, `PREFIX.missing` for a dir that does not exist), then, given `vllm`,
    the kept verdict and the install's identity (verdict.py)."""
    return "".join(
        _model_dir(directory, read.names, read.header_limit, prefix)
        + f'; [ $? -ne 3 ] || {{ : > "$tmp"; frame {q(prefix + MISSING)} "$tmp"; }}\n'
        for prefix, directory in read.model_dirs()
    ) + (verdict.section(read.vllm, layout.server_check) if read.vllm else "")


def prefixed(frames: dict[str, bytes], prefix: str) -> dict[str, bytes] | None:
    """The frames named after `prefix`, without it; None when they say the dir is missing."""
    if prefix + MISSING in frames:
        return None
    return {k[len(prefix) :]: v for k, v in frames.items() if k.startswith(prefix)}


_VERSION_LINE = re.compile(r"v?(\d+(?:\.\d+)+\S*)")


def is_version(text: str) -> bool:
    """A version as vLLM prints it (`0.32.0`, `0.11.1rc2.dev5+g1234`), nothing else."""
    return _VERSION_LINE.fullmatch(text) is not None


def parse_vllm_version(text: str, exit_code: int) -> tuple[str | None, str]:
    """What the version probe printed -> (version, "") or (None, why it is unknown).

    The last line that is a version wins: `vllm --version` may log before it."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if exit_code == 0:
        for line in reversed(lines):
            if match := _VERSION_LINE.fullmatch(line):
                return match.group(1), ""
    detail = lines[-1][:200] if lines else "no output"
    return (
        None,
        f"'vllm --version' and the package metadata gave no version (exit {exit_code}: {detail})",
    )
