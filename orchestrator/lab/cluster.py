"""`orch lab`: a Proxmox-like cluster on this machine, without root.

Host i is a real sshd at NETWORK.i.1:2222 with a `pct` stand-in; its
containers are directory trees at NETWORK.i.(10+j), every second one with an
sshd of its own (direct SSH) unless the spec turns that off. Every sshd keeps
OpenSSH's session limits unless the spec raises them. Each container's `vllm` is
the stand-in, or with `server="vllm"` the real vLLM built for CPUs serving tiny
models made here (realserver.py). `lab.json` records what runs, by PID, so
`down` stops exactly what `up` started, and every process started in a container
carries the container's mark (container_processes.py), so `down` ends those too.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from orchestrator.documents.lab import LabDown, LabStatus, LabTarget, LabUp
from orchestrator.errors import InputError
from orchestrator.lab import hold, pveconf, realserver, sshd, tiny_cache
from orchestrator.lab.container_processes import end_all, mark
from orchestrator.lab.models import install_models
from orchestrator.lab.paths import (
    DEFAULT_TOKENS_PER_SECOND,
    TOKENS_PER_SECOND_ENV,
    VLLM_VERSION_ENV,
    ContainerPaths,
    LabPaths,
    pid_alive,
    read_gpus,
    server_records,
    write_container_launchers,
    write_host_launchers,
    write_json_atomic,
    write_pct_launcher,
)
from orchestrator.lab.releases import UnknownRelease, default_release, release
from orchestrator.settings import state_dir
from orchestrator.transport.startups import STARTUPS

SSH_PORT = 2222
SERVER_PORT = 8000
FIRST_VMID = 200
GPU = {"name": "NVIDIA RTX A6000", "memory_total_mib": 49140}
GPUS_PER_CONTAINER = 2
# What a Proxmox host's sessions find after the host's own tools (Debian's root PATH).
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOAD_SECONDS_ENV = "ORCH_LAB_LOAD_SECONDS"
RESIDENT_GRACE_SECONDS = 10.0
"""How long `down` gives a container's processes between SIGTERM and SIGKILL."""
SERVERS = ("standin", "vllm")
"""What runs as each container's vLLM: the stand-in, or the real vLLM for CPUs."""


def default_lab_dir() -> Path:
    return state_dir() / "lab"


@dataclass(frozen=True)
class LabSpec:
    hosts: int = 1
    containers_per_host: int = 2
    load_seconds: float = 2.0
    network: str = "127.66"
    vllm_version: str = field(default_factory=default_release)
    """The vLLM version every container's stand-in claims and behaves as."""
    direct_ssh: bool = True
    max_sessions: int | None = None
    max_startups: str | None = None
    tokens_per_second: float = DEFAULT_TOKENS_PER_SECOND
    standalone: bool = False
    """One node in no cluster: pvesh's /cluster/status has no `cluster` entry, nodeid 0."""
    server: str = "standin"

    def __post_init__(self) -> None:
        if self.server not in SERVERS:
            raise InputError(f"--server {self.server!r}: expected one of {', '.join(SERVERS)}")
        try:
            release(self.vllm_version)
        except UnknownRelease as exc:
            raise InputError(f"--vllm-version {self.vllm_version!r}: {exc}") from None
        if self.max_sessions is not None and self.max_sessions < 0:
            raise InputError(f"--max-sessions {self.max_sessions}: expected 0 or more")
        if self.max_startups is not None and not STARTUPS.fullmatch(self.max_startups):
            raise InputError(f"--max-startups {self.max_startups!r}: expected N or START:RATE:FULL")
        parts = self.network.split(".")
        if len(parts) != 2 or parts[0] != "127" or not parts[1].isdigit() or int(parts[1]) > 255:
            raise InputError(f"--network {self.network!r}: expected 127.N (a loopback /16)")
        if not 1 <= self.hosts <= 250 or not 1 <= self.containers_per_host <= 200:
            raise InputError("--hosts must be 1..250 and --containers-per-host 1..200")
        if self.standalone and self.hosts != 1:
            raise InputError(f"--standalone is one node, not --hosts {self.hosts}")
        if not self.tokens_per_second > 0:
            raise InputError(f"--tokens-per-second must be > 0, got {self.tokens_per_second:g}")

    def reached_by_ssh(self, index: int) -> bool:
        """Every second container of a host has an sshd of its own, unless direct_ssh is off."""
        return self.direct_ssh and index % 2 == 1


@dataclass(frozen=True)
class Node:
    """One sshd the lab runs: a Proxmox host or a directly reached container."""

    name: str
    address: str
    port: int
    config: str
    log: str
    pid: int = 0


@dataclass(frozen=True)
class LabContainer:
    name: str
    vmid: int
    host: str
    address: str
    access: str
    root: str


class Lab:
    """A lab directory: its spec, files and recorded processes."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.paths = LabPaths(self.root)
        self.state_file = self.root / "lab.json"
        self.inventory = self.root / "inventory.yaml"
        self.key = self.root / "ssh" / "id_ed25519"
        self.known_hosts = self.root / "ssh" / "known_hosts"

    def load(self) -> dict:
        if not self.state_file.exists():
            raise InputError(f"no lab in {self.root}: run 'orch lab up' first")
        return json.loads(self.state_file.read_text())

    def nodes(self) -> list[Node]:
        return [Node(**n) for n in self.load()["nodes"]] if self.state_file.exists() else []

    def containers(self) -> list[LabContainer]:
        return [LabContainer(**c) for c in self.load()["containers"]]

    def running(self) -> bool:
        nodes = self.nodes()
        return bool(nodes) and all(sshd.is_our_sshd(n.pid, Path(n.config)) for n in nodes)

    def up(self, spec: LabSpec) -> bool:
        """Build and start the lab; False when it was already running as `spec` asks.
        A lab refused or failing half way leaves nothing behind: the processes it
        started are stopped by PID, and the directory is removed when it made it."""
        if self.running():
            recorded = LabSpec(**self.load()["spec"])
            if recorded != spec:
                raise InputError(
                    f"the lab in {self.root} already runs as {recorded}; "
                    "run 'orch lab down' first to change it"
                )
            return False
        made = not self.root.exists()
        started: list[Node] = []
        try:
            self._build(spec, started)
        except BaseException:
            self.down()  # what the state file records, once written
            stop_pids([n.pid for n in started if sshd.is_our_sshd(n.pid, Path(n.config))])
            if made:
                shutil.rmtree(self.root, ignore_errors=True)
            raise
        return True

    def _build(self, spec: LabSpec, started: list[Node]) -> None:
        """Build and start the lab, adding each sshd to `started` as it starts."""
        sshd.require_sshd()
        self.down()
        real = self._real_server(spec)
        hosts, containers = self._topology(spec)
        for node in [*hosts, *[n for n in containers if n]]:
            sshd.ensure_bindable(node.address, node.port)
        sshd.keygen(self.key, "orch-lab")
        authorized = self.root / "ssh" / "authorized_keys"
        authorized.write_text(Path(f"{self.key}.pub").read_text())
        known_lines = []
        lab_containers = self._build_containers(spec, real)
        for node in [*hosts, *[n for n in containers if n]]:
            node_dir = Path(node.config).parent
            host_key = node_dir / "ssh_host_ed25519_key"
            sshd.keygen(host_key, node.name)
            is_host = node in hosts
            path = f"{self.paths.host(node.name).bin}:{STANDARD_PATH}" if is_host else None
            # a container's sessions carry its mark, as pct exec's commands do
            marks = [] if is_host else [mark(node_dir.parent)]
            command = None if is_host else container_command(node_dir)
            Path(node.config).write_text(
                sshd.sshd_config(
                    node.address,
                    node.port,
                    host_key,
                    authorized,
                    node_dir / "sshd.pid",
                    path,
                    sshd.SessionLimits(spec.max_sessions, spec.max_startups),
                    marks,
                    command,
                )
            )
            pid = sshd.start(Path(node.config), Path(node.log))
            started.append(Node(**{**asdict(node), "pid": pid}))
            public = Path(f"{host_key}.pub").read_text().split()
            known_lines.append(f"[{node.address}]:{node.port} {public[0]} {public[1]}")
        self.known_hosts.write_text("\n".join(known_lines) + "\n")
        write_json_atomic(
            self.state_file,
            {
                "spec": asdict(spec),
                "server": {
                    "kind": spec.server,
                    "vllm_version": real["version"] if real else spec.vllm_version,
                },
                "nodes": [asdict(n) for n in started],
                "containers": [asdict(c) for c in lab_containers],
            },
        )
        for node in started:
            sshd.wait_listening(node.address, node.port, node.pid, Path(node.log))
        self.inventory.write_text(
            yaml.safe_dump(self._inventory(spec, lab_containers), sort_keys=False)
        )

    def down(self) -> list[int]:
        """Stop every process the lab started and every process started in its
        containers, by PID: the real servers it launched by their process groups (with
        the /dev/shm files they held), then whatever else carries a container's mark
        (container_processes: a server started from any `vllm`, the stand-ins, what a
        session left running), then the sshds. Returns the PIDs stopped."""
        if not self.state_file.exists():
            return []
        paths = [ContainerPaths(Path(container.root)) for container in self.containers()]
        records = [record for container in paths for record in server_records(container)]
        real = [r for r in records if r.get("server") == "vllm"]
        nodes = [n.pid for n in self.nodes() if sshd.is_our_sshd(n.pid, Path(n.config))]
        stopped = realserver.stop_servers(real)
        stopped += end_all([container.root for container in paths], RESIDENT_GRACE_SECONDS)
        stopped += stop_pids(nodes)
        for container in paths:
            shutil.rmtree(realserver.tmp_dir(container), ignore_errors=True)
        return stopped

    def bring_up(self, spec: LabSpec) -> LabUp:
        """`orch lab up`: started (or found running), and where its inventory is."""
        started = self.up(spec)
        running = self.server()
        return LabUp(
            started=started,
            dir=str(self.root),
            inventory=str(self.inventory),
            server=running["kind"],
            vllm_version=running["vllm_version"],
        )

    def take_down(self) -> LabDown:
        """`orch lab down`: the PIDs stopped."""
        return LabDown(dir=str(self.root), stopped=self.down())

    def report(self) -> LabStatus:
        """`orch lab status`: what serves, and each container's state."""
        server = self.server()
        return LabStatus(
            dir=str(self.root),
            server=server["kind"],
            vllm_version=server["vllm_version"],
            targets=self.status(),
        )

    def server(self) -> dict:
        """What serves in the containers: `kind` (standin or vllm) and `vllm_version`."""
        state = self.load()
        recorded = {"kind": "standin", "vllm_version": state["spec"]["vllm_version"]}
        return state.get("server") or recorded

    def set_acceptance(self, name: str, scale: float) -> Path:
        """Scale every position's acceptance on the servers of container `name` from their
        next draft on, without a restart (1 restores them); returns the knob's file."""
        if not 0 <= scale <= 1:
            raise InputError(f"acceptance scale {scale}: expected 0..1")
        found = [c for c in self.containers() if c.name == name]
        if not found:
            known = ", ".join(c.name for c in self.containers())
            raise InputError(f"no container {name!r} in the lab (it has {known})")
        paths = ContainerPaths(Path(found[0].root))
        write_json_atomic(paths.live, {"acceptance_scale": scale})
        return paths.live

    def status(self) -> list[LabTarget]:
        rows = []
        node_by_name = {n.name: n for n in self.nodes()}
        for container in self.containers():
            paths = ContainerPaths(Path(container.root))
            state = json.loads(paths.state.read_text())
            ssh_node = node_by_name.get(container.name) or node_by_name[container.host]
            rows.append(
                LabTarget(
                    name=container.name,
                    vmid=container.vmid,
                    host=container.host,
                    access=container.access,
                    ssh=f"{ssh_node.address}:{ssh_node.port}",
                    sshd_up=sshd.is_our_sshd(ssh_node.pid, Path(ssh_node.config)),
                    status=state["status"],
                    servers=[r["pid"] for r in server_records(paths)],
                )
            )
        return rows

    def _topology(self, spec: LabSpec) -> tuple[list[Node], list[Node | None]]:
        hosts: list[Node] = []
        containers: list[Node | None] = []
        for h in range(1, spec.hosts + 1):
            name = f"pve{h}"
            node_dir = self.paths.host(name).root / "sshd"
            node_dir.mkdir(parents=True, exist_ok=True)
            hosts.append(
                Node(
                    name,
                    f"{spec.network}.{h}.1",
                    SSH_PORT,
                    str(node_dir / "sshd_config"),
                    str(node_dir / "sshd.log"),
                )
            )
            for j in range(spec.containers_per_host):
                if not spec.reached_by_ssh(j):
                    containers.append(None)
                    continue
                vmid = FIRST_VMID + (h - 1) * 100 + j
                node_dir = self.paths.host(name).container(vmid).root / "sshd"
                node_dir.mkdir(parents=True, exist_ok=True)
                containers.append(
                    Node(
                        f"ct{vmid}",
                        f"{spec.network}.{h}.{10 + j}",
                        SSH_PORT,
                        str(node_dir / "sshd_config"),
                        str(node_dir / "sshd.log"),
                    )
                )
        return hosts, containers

    def _real_server(self, spec: LabSpec) -> dict | None:
        """The real server's venv, version and tiny models, when the spec asks for it."""
        if spec.server != "vllm":
            return None
        venv = realserver.require_venv()
        return {
            "venv": venv,
            "version": realserver.server_version(venv),
            "models": tiny_cache.ensure_made(venv),
        }

    def _build_containers(self, spec: LabSpec, real: dict | None) -> list[LabContainer]:
        python = sys.executable
        built = []
        for h in range(1, spec.hosts + 1):
            host = self.paths.host(f"pve{h}")
            write_pct_launcher(host, python)
            write_host_launchers(host, python)
            for j in range(spec.containers_per_host):
                vmid = FIRST_VMID + (h - 1) * 100 + j
                container = host.container(vmid)
                name = f"ct{vmid}"
                write_json_atomic(
                    container.state,
                    {"name": name, "vmid": vmid, "status": "running", "hostname": name},
                )
                minors = [j * GPUS_PER_CONTAINER + g for g in range(GPUS_PER_CONTAINER)]
                container.config.write_text(
                    conf_text(name, f"{spec.network}.{h}.{10 + j}", minors, j % 2 == 0)
                )
                write_container_launchers(
                    container,
                    python,
                    {
                        LOAD_SECONDS_ENV: str(spec.load_seconds),
                        TOKENS_PER_SECOND_ENV: str(spec.tokens_per_second),
                        VLLM_VERSION_ENV: spec.vllm_version,
                    },
                )
                write_json_atomic(
                    container.gpus,
                    [
                        {
                            "index": g,
                            "minor": minor,
                            **GPU,
                            "uuid": f"GPU-{vmid:08d}-0000-4000-8000-{g:012d}",
                        }
                        for g, minor in enumerate(minors)
                    ],
                )
                models_dir = container.rootfs / "opt" / "models"
                if real:
                    realserver.write_launcher(container, real["venv"])
                    tiny_cache.link_into(real["models"], models_dir)
                else:
                    install_models(container, models_dir)
                    tiny_cache.write_stubs(container, models_dir)
                (container.rootfs / "var" / "lib" / "orch").mkdir(parents=True, exist_ok=True)
                built.append(
                    LabContainer(
                        name,
                        vmid,
                        host.node,
                        f"{spec.network}.{h}.{10 + j}",
                        "ssh" if spec.reached_by_ssh(j) else "pct",
                        str(container.root),
                    )
                )
        return built

    def _inventory(self, spec: LabSpec, containers: list[LabContainer]) -> dict:
        inventory: dict = {
            "defaults": {
                "user": getpass.getuser(),
                "identity_file": str(self.key),
                "known_hosts": str(self.known_hosts),
            },
            "hosts": {},
            "containers": {},
            "groups": {"gpu": [c.name for c in containers]},
        }
        for h in range(1, spec.hosts + 1):
            host = self.paths.host(f"pve{h}")
            inventory["hosts"][host.node] = {
                "address": f"{spec.network}.{h}.1",
                "port": SSH_PORT,
                "pct_path": str(host.pct),
            }
        for c in containers:
            paths = ContainerPaths(Path(c.root))
            entry: dict = {"vmid": c.vmid, "host": c.host, "address": c.address, "access": c.access}
            if c.access == "ssh":
                entry["ssh"] = {"port": SSH_PORT}
            entry["gpus"] = [
                {"name": g["name"], "memory_mib": g["memory_total_mib"]} for g in read_gpus(paths)
            ]
            entry["vars"] = {
                "models_dir": str(paths.rootfs / "opt" / "models"),
                "vllm": str(paths.vllm),
                "nvidia_smi": str(paths.nvidia_smi),
                "state_dir": str(paths.rootfs / "var" / "lib" / "orch"),
            }
            inventory["containers"][c.name] = entry
        return inventory


def container_command(node_dir: Path) -> Path:
    """The container sshd's ForceCommand (in its `sshd/` directory): every command
    through the lab's hold."""
    script = node_dir / "command"
    script.write_text(hold.sshd_command(node_dir.parent))
    script.chmod(0o755)
    return script


def conf_text(name: str, address: str, gpu_minors: list[int], device_keys: bool) -> str:
    """A lab container's /etc/pve/lxc/VMID.conf (lab.pveconf). GPUs are passed through
    with PVE 8's `devN` keys, or the older way (`lxc.mount.entry` binds with a cgroup
    rule) when not `device_keys`: docs/field-notes/proxmox.md, `devN`."""
    nodes = [f"/dev/nvidia{m}" for m in gpu_minors] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    keys = {
        "arch": "amd64",
        "cores": "16",
        "hostname": name,
        "memory": "131072",
        "net0": f"name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:00,ip={address}/32,type=veth",
        "ostype": "debian",
    }
    lxc = []
    if device_keys:
        keys.update({f"dev{i}": f"{node},mode=0666" for i, node in enumerate(nodes)})
    else:
        allow = "lxc.cgroup2.devices.allow"
        lxc = [(allow, "c 195:* rwm"), (allow, "c 508:* rwm")]
        lxc += [("lxc.mount.entry", f"{n} {n[1:]} none bind,optional,create=file") for n in nodes]
    return pveconf.file_text(pveconf.Conf(pveconf.Section(keys, lxc)))


def stop_pids(pids: list[int], timeout: float = 5.0) -> list[int]:
    """SIGTERM all, wait for all, then SIGKILL the rest: the lab's own processes, by PID."""
    signalled = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in signalled):
        time.sleep(0.05)
    for pid in signalled:
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return signalled
