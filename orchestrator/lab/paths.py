"""Where the lab keeps its hosts and containers on disk: one definition for every part of it.

```
LAB/hosts/<host>/bin/pct                      pct stand-in launcher
LAB/hosts/<host>/root-uid                     the uid that plays root on this host
LAB/hosts/<host>/containers/<vmid>/state.json {"name", "vmid", "status", "hostname"}
                                   config     its /etc/pve/lxc/VMID.conf (lab.pveconf)
                                   rootfs/    the container's file system
                                   lab/       gpus.json, faults.json, truth/, servers/
```
A container has no chroot (the lab runs without root): a path inside it is a
real absolute path under `rootfs/`, and that is what the inventory names.

The record of a running vLLM stand-in (`lab/servers/<pid>.json`) is read by
the nvidia-smi and pct stand-ins, so its helpers live here too.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.lab.hold import HOLD_FUNCTIONS

VLLM_MODULE = "orchestrator.lab.vllm_standin"
DRY_RUN_MODULE = "orchestrator.lab.vllm_dry_run"
SHEBANG_LIMIT = 256
"""Linux reads this much of a `#!` line, newline included (BINPRM_BUF_SIZE since 5.1)."""
NVIDIA_SMI_MODULE = "orchestrator.lab.nvidia_smi"
PCT_MODULE = "orchestrator.lab.pct_standin"
PVESH_MODULE = "orchestrator.lab.pvesh_standin"
CONTAINER_ENV = "ORCH_LAB_CONTAINER"
HOST_ENV = "ORCH_LAB_HOST"
VLLM_VERSION_ENV = "ORCH_LAB_VLLM_VERSION"
"""The vLLM version a container's stand-in claims (`orch lab up --vllm-version`)."""
TOKENS_PER_SECOND_ENV = "ORCH_LAB_TOKENS_PER_SECOND"
DEFAULT_TOKENS_PER_SECOND = 1000.0
"""One stream's decode speed without speculation (step_cost.py: a step is one unit there):
a 256-token request of the published drafter takes about 60 steps of 2.4 ms at one stream."""


@dataclass(frozen=True)
class ContainerPaths:
    """One container's directory: `LAB/hosts/<host>/containers/<vmid>/`."""

    root: Path

    @property
    def vmid(self) -> int:
        return int(self.root.name)

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def rootfs(self) -> Path:
        return self.root / "rootfs"

    @property
    def vllm(self) -> Path:
        return self.rootfs / "usr/local/bin/vllm"

    @property
    def vllm_python(self) -> Path:
        """The interpreter the lab's `vllm` console script names, as a venv's would be."""
        return self.rootfs / "opt/vllm/bin/python"

    def vllm_record(self, version: str) -> Path:
        """The install's dist-info RECORD, where pip puts it for that interpreter."""
        site = self.rootfs / "opt/vllm/lib/python3/site-packages"
        return site / f"vllm-{version}.dist-info/RECORD"

    @property
    def nvidia_smi(self) -> Path:
        return self.rootfs / "usr/bin/nvidia-smi"

    @property
    def lab(self) -> Path:
        return self.root / "lab"

    @property
    def gpus(self) -> Path:
        return self.lab / "gpus.json"

    @property
    def faults(self) -> Path:
        return self.lab / "faults.json"

    @property
    def live(self) -> Path:
        """Knobs read while running, set without a restart: a server's `acceptance_scale`."""
        return self.lab / "live.json"

    @property
    def truth_dir(self) -> Path:
        return self.lab / "truth"

    @property
    def servers_dir(self) -> Path:
        return self.lab / "servers"

    def truth(self, drafter_dir_name: str) -> Path:
        """The published drafter config for the weights in a directory of that name."""
        return self.truth_dir / f"{drafter_dir_name}.config.json"

    def server_record(self, pid: int) -> Path:
        return self.servers_dir / f"{pid}.json"

    def host_path(self, container_path: str | Path) -> Path:
        """A path inside the container as a real path: kept when already under rootfs."""
        path = Path(container_path)
        if path.is_absolute() and path.is_relative_to(self.rootfs):
            return path
        return self.rootfs / str(path).lstrip("/")


@dataclass(frozen=True)
class HostPaths:
    """One Proxmox host's directory: `LAB/hosts/<host>/`; its name is the node name."""

    root: Path

    @property
    def node(self) -> str:
        return self.root.name

    @property
    def bin(self) -> Path:
        """The host's tools: first on the PATH of its SSH sessions (sshd's SetEnv)."""
        return self.root / "bin"

    @property
    def pct(self) -> Path:
        return self.bin / "pct"

    @property
    def pvesh(self) -> Path:
        return self.bin / "pvesh"

    @property
    def nvidia_smi(self) -> Path:
        return self.bin / "nvidia-smi"

    @property
    def root_uid(self) -> Path:
        """The uid pct and pvesh take for root: the lab runs without root, so the user
        who built it plays root (a test writes another uid to log in as a non-root user)."""
        return self.root / "root-uid"

    def runs_as_root(self) -> bool:
        """Is this process root on this host (`$> == 0` for the real tools)?"""
        try:
            return os.geteuid() == int(self.root_uid.read_text())
        except (OSError, ValueError):
            return os.geteuid() == 0

    @property
    def containers_dir(self) -> Path:
        return self.root / "containers"

    def container(self, vmid: int) -> ContainerPaths:
        return ContainerPaths(self.containers_dir / str(vmid))

    def containers(self) -> list[ContainerPaths]:
        """The host's containers in VMID order."""
        if not self.containers_dir.is_dir():
            return []
        dirs = [d for d in self.containers_dir.iterdir() if d.name.isdigit()]
        return [ContainerPaths(d) for d in sorted(dirs, key=lambda d: int(d.name))]


@dataclass(frozen=True)
class LabPaths:
    """The lab's top directory: `LAB/`."""

    root: Path

    def host(self, name: str) -> HostPaths:
        return HostPaths(self.root / "hosts" / name)

    def hosts(self) -> list[HostPaths]:
        """Every host of the lab, in node-number order (pve1, pve2, ...)."""
        hosts_dir = self.root / "hosts"
        found = (
            [HostPaths(d) for d in hosts_dir.iterdir() if d.is_dir()] if hosts_dir.is_dir() else []
        )
        return sorted(found, key=lambda h: (len(h.node), h.node))


def write_launcher(
    path: Path,
    module: str,
    env: Mapping[str, str],
    python: str,
    args: Sequence[str] = (),
    prelude: Sequence[str] = (),
) -> None:
    """Write an executable shell wrapper that execs `python -m module args... "$@"`,
    after the `prelude` lines (which may exec something else first)."""
    lines = ["#!/bin/sh"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    lines += prelude
    command = " ".join(shlex.quote(word) for word in [python, "-m", module, *args])
    lines.append(f'exec {command} "$@"')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)


# `pct exec VMID -- ARGV` on a running container, in sh: it is most of a deploy's
# calls, and a Python interpreter per call would cost the lab far more than the real
# pct's Perl start costs a Proxmox host. Anything else, errors included, goes to the
# Python stand-in, which words them as pct does. As in the stand-in: PATH is the
# container's standard directories then the host's, HOME=/root, CONTAINER_ENV names the
# container's directory (how `pct stop` and `lab down` find what runs in it), the
# working directory is the rootfs, and a command that cannot be run exits as lxc-attach
# does. Only the host's root takes this path (the effective uid read without a fork,
# from the shell's own /proc/self/status); pct refuses anyone else. The command goes
# through the lab's hold (lab/hold.py), as the container sshd's commands do.
_PCT_EXEC = """\
euid=; lab_root=
if [ "$1" = exec ] && [ "$3" = -- ] && [ $# -ge 4 ]; then
  while read -r key real effective rest; do
    if [ "$key" = Uid: ]; then euid=$effective; break; fi
  done < /proc/self/status
  read -r lab_root < "$host/root-uid" || lab_root=
fi
if [ -n "$euid" ] && [ "$euid" = "$lab_root" ]; then
  case $2 in
  [1-9]*[!0-9]*) ;;
  [1-9]*)
    ct=$host/containers/$2
    running=
    if [ -f "$ct/state.json" ]; then
      while IFS= read -r line; do
        case $line in *'"status": "running"'*) running=1 ;; esac
      done < "$ct/state.json"
    fi
    if [ -n "$running" ]; then
      vmid=$2; shift 3
      root=$ct/rootfs
      PATH=$root/sbin:$root/bin:$root/usr/sbin:$root/usr/bin:/sbin:/bin:/usr/sbin:/usr/bin
      HOME=/root
      ORCH_LAB_CONTAINER=$ct
      export PATH HOME ORCH_LAB_CONTAINER
      cd "$root" || exit 255
      export PWD
      name=$1; shift
      program=$name
      case $program in
      */*) ;;
      *)
        set -f; IFS=:
        for dir in $PATH; do
          if [ -f "$dir/$name" ] && [ -x "$dir/$name" ]; then program=$dir/$name; break; fi
        done
        unset IFS; set +f ;;
      esac
      case $program in
      */*)
        if [ -f "$program" ] && [ -x "$program" ]; then
          lab_text="$name $*"; held_run "$program" "$@"
        fi
        [ -e "$program" ] && { reason="Permission denied"; code=126; } ;;
      esac
      echo "lxc-attach: $vmid: ../src/lxc/attach.c: lxc_attach_run_command: 1841" \\
        "${reason:-No such file or directory} - Failed to exec \\"$name\\"" >&2
      exit "${code:-127}"
    fi ;;
  esac
fi
"""


def write_pct_launcher(host: HostPaths, python: str) -> None:
    """The host's `bin/pct`, bound to that host's directory: `exec` in sh, the rest in
    Python; and the host's root (the user writing it, unless a uid is there already)."""
    if not host.root_uid.exists():
        host.root_uid.parent.mkdir(parents=True, exist_ok=True)
        host.root_uid.write_text(f"{os.geteuid()}\n")
    prelude = [
        f"host={shlex.quote(str(host.root))}",
        HOLD_FUNCTIONS.rstrip("\n"),
        _PCT_EXEC.rstrip("\n"),
    ]
    write_launcher(host.pct, PCT_MODULE, {}, python, ["--host-dir", str(host.root)], prelude)


def write_host_launchers(host: HostPaths, python: str) -> None:
    """The host's `pvesh` (answering for the whole lab) and `nvidia-smi` (the node's GPUs)."""
    lab_root = str(host.root.parent.parent)
    write_launcher(
        host.pvesh, PVESH_MODULE, {}, python, ["--lab-dir", lab_root, "--node", host.node]
    )
    write_launcher(host.nvidia_smi, NVIDIA_SMI_MODULE, {HOST_ENV: str(host.root)}, python)


def write_container_launchers(
    container: ContainerPaths, python: str, vllm_env: Mapping[str, str] | None = None
) -> None:
    """The container's `vllm` and `nvidia-smi`, bound to that container's directory.

    `vllm` is installed as pip installs a console script: `#!` its interpreter (the
    lab's, which runs the stand-in), with a dist-info RECORD written anew at each
    install. Run as `PYTHON - REQUEST`, as orch's server check runs a venv's Python,
    the interpreter answers the check (vllm_dry_run.py)."""
    env = {CONTAINER_ENV: str(container.root), **(vllm_env or {})}
    dry_run = shlex.join([python, "-m", DRY_RUN_MODULE])
    write_launcher(
        container.vllm_python,
        VLLM_MODULE,
        env,
        python,
        prelude=[f'if [ "$1" = - ]; then exec {dry_run} "$@"; fi', "shift  # the script's path"],
    )
    shebang = f"#!{container.vllm_python}\n"
    if len(shebang.encode()) > SHEBANG_LIMIT:
        raise ValueError(f"the lab directory is too deep for a #! line: {container.vllm_python}")
    container.vllm.parent.mkdir(parents=True, exist_ok=True)
    container.vllm.write_text(f"{shebang}# the lab's vLLM ({VLLM_MODULE})\n")
    container.vllm.chmod(0o755)
    for old in container.vllm_record("x").parent.parent.glob("vllm-*.dist-info"):
        shutil.rmtree(old)
    record = container.vllm_record(env.get(VLLM_VERSION_ENV) or "lab")
    record.parent.mkdir(parents=True)
    record.write_text(f"{VLLM_MODULE.replace('.', '/')}.py,,\n")
    write_launcher(
        container.nvidia_smi, NVIDIA_SMI_MODULE, {CONTAINER_ENV: str(container.root)}, python
    )


def write_json_atomic(path: Path, data: object) -> None:
    """Readers never see half a file: write beside it, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, indent=2) + "\n")
    temporary.replace(path)


def pid_alive(pid: int) -> bool:
    """Running and not a zombie (the lab's PID 1 may never reap what it inherits)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def is_vllm_standin(pid: int) -> bool:
    """Alive and running the vLLM stand-in: a reused PID is not ours."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return pid_alive(pid) and VLLM_MODULE.encode() in cmdline


def process_start(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (/proc/PID/stat field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def is_live_server(record: dict) -> bool:
    """The server a record names is running: a stand-in by its command line, the real
    vLLM (`"server": "vllm"`) by the start time its launcher recorded."""
    pid = record.get("pid")
    if not isinstance(pid, int):
        return False
    if record.get("server") == "vllm":
        return pid_alive(pid) and process_start(pid) == record.get("start")
    return is_vllm_standin(pid)


def server_records(container: ContainerPaths) -> list[dict]:
    """Records of the container's running vLLM servers (stand-ins or real); stale or
    half-written ones skipped."""
    if not container.servers_dir.is_dir():
        return []
    records = []
    for path in sorted(container.servers_dir.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and is_live_server(record):
            records.append(record)
    return records


def read_gpus(container: ContainerPaths) -> list[dict]:
    """The container's GPUs from `lab/gpus.json`; none when the file is absent."""
    if not container.gpus.exists():
        return []
    return json.loads(container.gpus.read_text())
