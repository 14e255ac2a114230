"""Preflight's read-only probes of a container: a model directory in one round trip,
and the small facts (GPUs, GPU processes, the vLLM version, free disk, the recorded
server, the current release) in another."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from orchestrator.container.gpu import GPU_APPS_QUERY, GPU_QUERY
from orchestrator.container.shell import FRAME_FUNCTIONS, PROCESS_FUNCTIONS, builder, q, script
from orchestrator.layout import Layout

# The server's version: `vllm --version`, else the package metadata of the Python
# beside the vllm command (a venv's bin/), as importlib.metadata reads it.
_VERSION_FUNCTION = """\
vllm_version() { "$1" --version 2>/dev/null || "${1%/*}/python" -c \
'import importlib.metadata as m; print(m.version("vllm"))'; }
"""


@builder
def read_model_dir(directory: str, names: Sequence[str], header_limit: int) -> list[str]:
    """One round trip for a model directory, as frames `NAME LENGTH\\n` + bytes:
    the listing (`.listing`: `SIZE NAME` lines), each of `names` that exists, and
    the header prefix (8 + N bytes) of every *.safetensors file. Exit 3: no such dir."""
    wanted = " ".join(q(n) for n in names)
    return script(
        f"cd {q(directory)} || exit 3\n"
        + FRAME_FUNCTIONS
        + "find -L . -maxdepth 1 -type f -printf '%s %P\\n' | sort -k2 > \"$tmp\"; "
        'frame .listing "$tmp"\n'
        f'for n in {wanted}; do [ -f "$n" ] && frame "$n" "$n"; done\n'
        'for f in *.safetensors; do [ -f "$f" ] || continue\n'
        "  n=$(head -c 8 \"$f\" | od -An -tu8 | tr -d ' ')\n"
        f'  [ -n "$n" ] && [ "$n" -le {int(header_limit)} ] || n=0\n'
        '  head -c $((8 + n)) "$f" > "$tmp"; frame "$f" "$tmp"\n'
        "done\n"
    )


@builder
def target_facts(layout: Layout, nvidia_smi: str, vllm: str) -> list[str]:
    """Preflight's small facts in one round trip, as frames: `gpus`, `apps` and
    `version` (the vLLM version, see _VERSION_FUNCTION) with their `.rc`, `disk`
    (free KiB where the deployment goes), `server`, `current`."""
    return script(
        PROCESS_FUNCTIONS
        + FRAME_FUNCTIONS
        + _VERSION_FUNCTION
        + f"capture gpus {shlex.join([nvidia_smi, *GPU_QUERY])}\n"
        + f"capture apps {shlex.join([nvidia_smi, *GPU_APPS_QUERY])}\n"
        + f"capture version vllm_version {q(vllm)}\n"
        + f'p={q(layout.root)}; while [ ! -e "$p" ]; do p=${{p%/*}}; [ -n "$p" ] || p=/; done\n'
        + 'df -Pk "$p" | awk \'NR==2 {print $4}\' > "$tmp"; frame disk "$tmp"\n'
        + f'recorded {q(layout.server_pid)} > "$tmp"; frame server "$tmp"\n'
        + f'readlink {q(layout.current)} > "$tmp" 2>/dev/null; frame current "$tmp"\n'
    )


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
