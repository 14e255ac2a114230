"""Resident memory and throughput of the lab's vLLM stand-in, beside a bare Python peer.

Run: `.venv/bin/python benchmarks/standin.py`. Builds one lab container in a
temporary directory, starts a stand-in (published drafter config) and, as the
baseline, `python -c "import time; time.sleep(9)"`; prints VmRSS of both idle,
the stand-in's peak VmRSS while busy, and generated tokens/s driven through
/v1/completions at concurrency 1 and 8. Every process is stopped by its PID.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from orchestrator.drafters.profiles import get_profile
from orchestrator.lab.models import install_models
from orchestrator.lab.paths import ContainerPaths, write_container_launchers, write_json_atomic

PROFILE = "z-lab/Qwen3.6-27B-DFlash"
MAX_TOKENS = 256
REQUESTS = 64


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def build(root: Path) -> tuple[ContainerPaths, Path, Path]:
    """A container with GPUs, models, launchers and a deployed drafter view."""
    profile = get_profile(PROFILE)
    container = ContainerPaths(root / "hosts/pve1/containers/100")
    gpu = {"name": "NVIDIA RTX A6000", "memory_total_mib": 49140, "uuid": "GPU-bench"}
    write_json_atomic(container.gpus, [{"index": 0, **gpu}])
    models = container.rootfs / "opt/models"
    install_models(container, models)
    target = models / profile.target_name.rsplit("/", 1)[-1]
    weights = models / profile.name.rsplit("/", 1)[-1] / "model.safetensors"
    drafter = container.rootfs / "var/lib/orch/releases/bench/drafter"
    drafter.mkdir(parents=True)
    (drafter / "model.safetensors").symlink_to(weights)
    (drafter / "config.json").write_text(json.dumps(profile.config))
    write_container_launchers(container, sys.executable)
    return container, target, drafter


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post(port: int, max_tokens: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        body = json.dumps({"prompt": "benchmark", "max_tokens": max_tokens})
        connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        return json.loads(connection.getresponse().read())["usage"]["completion_tokens"]
    finally:
        connection.close()


def wait_ready(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"stand-in exited with {process.returncode}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("stand-in not ready within 30 s")


def tokens_per_second(port: int, concurrency: int, pid: int) -> tuple[float, int]:
    """Generated tokens/s over REQUESTS completions, and the peak RSS (KiB) meanwhile."""
    peak, done = [rss_kib(pid)], threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            peak.append(rss_kib(pid))

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(lambda _: post(port, MAX_TOKENS), range(REQUESTS)))
    elapsed = time.monotonic() - started
    done.set()
    watcher.join()
    return tokens / elapsed, max(peak)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        container, target, drafter = build(Path(tmp))
        port = free_port()
        spec = {"method": "dflash", "model": str(drafter), "num_speculative_tokens": 15}
        argv = [str(container.vllm), "serve", str(target), "--port", str(port)]
        argv += ["--speculative-config", json.dumps(spec), "--load-seconds", "0.2"]
        standin = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(9)"])
        try:
            wait_ready(port, standin)
            time.sleep(0.5)
            idle, baseline = rss_kib(standin.pid), rss_kib(peer.pid)
            single, _ = tokens_per_second(port, 1, standin.pid)
            parallel, busy = tokens_per_second(port, 8, standin.pid)
        finally:
            stop(standin)
            stop(peer)
    print(f"python sleep peer (baseline)  VmRSS {baseline / 1024:6.1f} MiB")
    print(f"vllm stand-in, idle           VmRSS {idle / 1024:6.1f} MiB")
    print(f"vllm stand-in, busy (peak)    VmRSS {busy / 1024:6.1f} MiB")
    print(f"generated tokens/s, 1 stream  {single:8.0f}")
    print(f"generated tokens/s, 8 streams {parallel:8.0f}")


if __name__ == "__main__":
    main()
