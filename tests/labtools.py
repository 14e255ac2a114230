"""Helpers for tests against a real lab: free networks, the CLI as a process, what a
lab looks like to the tests that share it."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import re
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml
from orchrun import RunResult, orch

from orchestrator.lab import sshd
from orchestrator.lab.cluster import SSH_PORT, Lab, LabSpec
from orchestrator.lab.paths import ContainerPaths, server_records

LOAD_SECONDS = 0.3
"""How long a lab's vLLM stand-in loads: long enough that orch must wait for /health."""
FAST = [
    "--set",
    "gate.probe.scrape_interval=0.25",
    "--set",
    "gate.ready_timeout=30",
    "--set",
    "gate.speed.max_regression=1",
    "--set",
    "gate.settle_seconds=0",
]
"""A deploy's gate on the lab: scrapes often, and still waits generously for a busy machine.
A release that passed is kept after the settle's one look (health and a probe) without its
5 s of watching: a server dying after its verdict has a test of its own (test_deploy_lab).
A later deploy is not judged on its speed against the release it replaces: on a machine
running four lab tests at once the stand-in's speed drifts between runs by more than one
run's bounds hold; the speed verdict has tests of its own (test_baseline_lab, unit)."""
ALL_AT_ONCE = ["--set", "rollout.canary=0", "--set", "rollout.parallel=100%"]
"""Every container of the run at once: no canary, one wave."""
_networks = itertools.count(random.randrange(100, 200))


def _this_workers(octet: int) -> bool:
    """Parallel workers (pytest-xdist) take disjoint networks: no two probe the same one."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    return octet % workers == worker


def free_network() -> str:
    """A loopback /16 of this worker whose first host address is free for the lab's sshd."""
    for second in _networks:
        octet = second % 250 + 1
        if not _this_workers(octet):
            continue
        network = f"127.{octet}"
        with socket.socket() as probe:
            try:
                probe.bind((f"{network}.1.1", SSH_PORT))
                return network
            except OSError:
                continue
    raise RuntimeError("no free loopback network")


@dataclass
class LabHandle:
    lab: Lab
    env: dict[str, str]
    deployed: dict | None = None
    """The `deploy --json` document of the deploy a shared deployed lab was made with."""

    @property
    def inventory(self) -> Path:
        return self.lab.inventory

    def orch(self, *args: str, timeout: float = 300) -> RunResult:
        """Run the real CLI in its own process, in this lab's environment."""
        return orch(*args, env=self.env, timeout=timeout)

    def container_vars(self, name: str) -> dict:
        return yaml.safe_load(self.inventory.read_text())["containers"][name]["vars"]

    def deployment_dir(self, name: str, playbook: str = "qwen-dflash") -> Path:
        return Path(self.container_vars(name)["state_dir"]) / playbook


def cli_env(state_dir: Path) -> dict[str, str]:
    """The environment the CLI runs in: its own history, plain wide output."""
    return {**os.environ, "ORCH_STATE_DIR": str(state_dir), "NO_COLOR": "1", "COLUMNS": "200"}


def start_lab(root: Path, **spec: object) -> Lab:
    """A running lab in root on a free network; `spec` sets other LabSpec fields."""
    lab = Lab(root)
    lab.up(LabSpec(**{"load_seconds": LOAD_SECONDS, "network": free_network(), **spec}))
    return lab


def lab_state(lab: Lab) -> dict:
    """What a test that shares a lab must leave as it found it: the sshd and server
    processes (by PID), each container's status, faults and deployed files, the
    inventory and known_hosts."""
    nodes = {n.name: (n.pid, sshd.is_our_sshd(n.pid, Path(n.config))) for n in lab.nodes()}
    containers = {}
    for container in lab.containers():
        paths = ContainerPaths(Path(container.root))
        containers[container.name] = {
            "status": json.loads(paths.state.read_text())["status"],
            "servers": sorted(record["pid"] for record in server_records(paths)),
            "faults": paths.faults.read_text() if paths.faults.exists() else None,
            "live": paths.live.read_text() if paths.live.exists() else None,
            "deployed": tree(paths.rootfs / "var" / "lib" / "orch"),
        }
    files = {path.name: path.read_text() for path in (lab.inventory, lab.known_hosts)}
    return {"nodes": nodes, "containers": containers, "files": files}


def tree(root: Path) -> dict[str, str]:
    """Every entry under root, links not followed: a link's target, a file's SHA-256
    (a log, which grows with every request served, only by its name)."""
    entries = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                entries[key] = f"-> {os.readlink(path)}"
            elif path.is_dir():
                entries[key] = "dir"
            elif path.suffix == ".log":
                entries[key] = "log"
            else:
                entries[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return entries


def changes(before: dict, after: dict, where: str = "") -> list[str]:
    """Where two lab_state()s differ, as dotted paths with both values."""
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(before.keys() | after.keys(), key=str):
            found += changes(before.get(key), after.get(key), f"{where}.{key}".lstrip("."))
        return found
    return [] if before == after else [f"{where}: {before!r:.80} -> {after!r:.80}"]


def metrics_text(address: str, port: int) -> str:
    """A server's /metrics as Prometheus text (vLLM's names, colons unescaped)."""
    request = urllib.request.Request(
        f"http://{address}:{port}/metrics", headers={"Accept": "text/plain; version=0.0.4"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read().decode()


def spec_decode_totals(text: str) -> dict[str, float]:
    """Each vllm:spec_decode_*_total counter of a /metrics text, summed over its labels."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        found = re.match(r"^vllm:spec_decode_(\w+)_total(?:\{[^}]*\})? (\S+)$", line)
        if found:
            totals[found[1]] = totals.get(found[1], 0.0) + float(found[2])
    return totals


def post_completion(
    address: str, port: int, model: str, key: str | None, timeout: float = 120
) -> tuple[int, bytes]:
    """POST /v1/completions (two tokens after "hi") with `key` as its bearer token: the
    status, and the body of an error."""
    body = json.dumps({"model": model, "prompt": "hi", "max_tokens": 2}).encode()
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(
        f"http://{address}:{port}/v1/completions", body, headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, b""
    except urllib.error.HTTPError as error:
        return error.code, error.read()
