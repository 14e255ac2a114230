"""The lab's stand-ins as real processes, for the local tests: a container's
directories, a drafter deployed in them, `vllm serve` started through the container's
launcher and stopped by its PID, requests to it, and acceptance measured from its
/metrics."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.drafters.modelfiles import write_safetensors_stub
from orchestrator.drafters.profiles import get_profile
from orchestrator.lab.models import dflash_layout, published_drafter_config
from orchestrator.lab.paths import (
    ContainerPaths,
    HostPaths,
    write_container_launchers,
    write_json_atomic,
    write_pct_launcher,
)

REFERENCE = Path(__file__).parent / "fixtures/drafters"  # the published configs
RENDERED = get_profile("z-lab/Qwen3.6-27B-DFlash").config  # as orch renders and deploys it
TRUTH = published_drafter_config("z-lab/Qwen3.6-27B-DFlash")  # the lab's copy, as published
DRAFTER_NAME = "Qwen3.6-27B-DFlash"


# --- a lab container on disk -----------------------------------------------------------------


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free loopback port not handed out before in this process. A server binds its
    port only once it runs, so servers started together could be given the same one;
    the stand-in binds with SO_REUSEADDR and listens after loading, so both would bind
    and the second's clients would be answered by the first."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def build_container(root: Path, gpus: int = 2) -> ContainerPaths:
    """Host pve1 with container 100: running, two GPUs, target and drafter dirs, truth, bin/."""
    host = HostPaths(root / "hosts" / "pve1")
    container = host.container(100)
    write_json_atomic(
        container.state, {"name": "gpu1", "vmid": 100, "status": "running", "hostname": "gpu1"}
    )
    container.config.write_text("arch: amd64\ncores: 16\nhostname: gpu1\nmemory: 131072\n")
    write_json_atomic(
        container.gpus,
        [
            {
                "index": i,
                "name": "NVIDIA RTX A6000",
                "memory_total_mib": 49140,
                "uuid": f"GPU-0000010{i}-0000-4000-8000-000000000000",
            }
            for i in range(gpus)
        ],
    )
    target_dir(container).mkdir(parents=True)
    (target_dir(container) / "config.json").write_text(
        (REFERENCE / "Qwen3.6-27B.config.json").read_text()
    )
    add_drafter_weights(container, DRAFTER_NAME, TRUTH)
    write_container_launchers(container, sys.executable)
    write_pct_launcher(host, sys.executable)
    return container


def target_dir(container: ContainerPaths) -> Path:
    return container.rootfs / "models/Qwen3.6-27B"


def add_drafter_weights(container: ContainerPaths, name: str, truth: dict) -> Path:
    """A published drafter: weights of 5 layers (fc.weight [5120, 25600]), its truth config."""
    weights = container.rootfs / "models" / name
    weights.mkdir(parents=True)
    write_safetensors_stub(weights / "model.safetensors", dflash_layout(TRUTH))
    write_json_atomic(container.truth(name), truth)
    return weights


def deploy_drafter(container: ContainerPaths, release: str, config: dict | None, name: str) -> Path:
    """A release's drafter view: a link to the weights and its own config.json."""
    view = container.rootfs / "var/lib/orch/releases" / release / "drafter"
    view.mkdir(parents=True)
    (view / "model.safetensors").symlink_to(
        container.rootfs / "models" / name / "model.safetensors"
    )
    if config is not None:
        (view / "config.json").write_text(json.dumps(config))
    return view


def speculative(drafter: Path, k: int = 15) -> str:
    return json.dumps({"method": "dflash", "model": str(drafter), "num_speculative_tokens": k})


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    log: Path
    container: ContainerPaths

    @property
    def record(self) -> Path:
        return self.container.server_record(self.process.pid)

    def output(self) -> str:
        return self.log.read_text()


def stop_by_pid(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def start_vllm(
    started: list[subprocess.Popen],
    container: ContainerPaths,
    *flags: str,
    drafter: Path | None = None,
    load_seconds: float = 0.3,
    faults: dict | None = None,
    env: dict[str, str | None] | None = None,
) -> Server:
    """`vllm serve` through the container's launcher, output to a log file (an `env`
    value None unsets the variable)."""
    port = free_port()
    argv = [str(container.vllm), "serve", str(target_dir(container))]
    if drafter is not None:
        argv += ["--speculative-config", speculative(drafter)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--load-seconds", str(load_seconds)]
    # The playbook's launch environment: today's vLLM serves mixed drafters on the V2 runner.
    environment = {**os.environ, "VLLM_USE_V2_MODEL_RUNNER": "1", **(env or {})}
    environment = {name: value for name, value in environment.items() if value is not None}
    if faults is not None:
        environment["ORCH_LAB_FAULTS"] = json.dumps(faults)
    log = container.root / f"vllm-{port}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*argv, *flags], stdout=output, stderr=subprocess.STDOUT, env=environment
        )
    started.append(process)
    return Server(process, port, log, container)


def wait_until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.02)


def request(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, bytes, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        payload = None if body is None else json.dumps(body).encode()
        connection.request(method, path, payload, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read(), response.getheader("Content-Type") or ""
    finally:
        connection.close()


def is_ready(server: Server) -> bool:
    assert server.process.poll() is None, server.output()
    try:
        return request(server.port, "GET", "/health")[0] == 200
    except OSError:
        return False


def wait_ready(server: Server) -> Server:
    wait_until(lambda: is_ready(server))
    return server


def samples(port: int) -> dict[tuple[str, str], float]:
    """Metric samples by (name, position label) from /metrics, as an exporter reader sees them."""
    status, body, _ = request(port, "GET", "/metrics")
    assert status == 200
    return {
        (sample.name, sample.labels.get("position", "")): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


GREEDY = {"temperature": 0}
"""What the gate's probes send by default."""


def complete(port: int, max_tokens: int, sampling: dict = GREEDY) -> dict:
    body = {"prompt": "Explain speculative decoding", "max_tokens": max_tokens, **sampling}
    status, body, _ = request(port, "POST", "/v1/completions", body)
    assert status == 200, body
    return json.loads(body)


@dataclass
class Acceptance:
    drafts: float
    mean_length: float
    per_position: list[float]


def measure(port: int, requests: int, max_tokens: int = 256, sampling: dict = GREEDY) -> Acceptance:
    """Drive completions and read the spec-decode counter deltas, as the gate does."""
    before = samples(port)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: complete(port, max_tokens, sampling), range(requests)))
    after = samples(port)

    def delta(name: str, position: str = "") -> float:
        return after[(name, position)] - before[(name, position)]

    drafts = delta("vllm:spec_decode_num_drafts_total")
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    per_position = [
        delta("vllm:spec_decode_num_accepted_tokens_per_pos_total", str(i)) / drafts
        for i in range(15)
    ]
    return Acceptance(drafts, 1 + accepted / drafts, per_position)
