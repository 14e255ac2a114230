"""How long `orch lab up` and `orch lab down` take, and what a full lab holds in memory.

Run: `.venv/bin/python benchmarks/lab.py [--runs N]`. Times the CLI's
`lab up` / `lab down` as child processes for the default lab (1 host x 2
containers, median of N) and for 4 hosts x 16 containers; in the big lab it
starts one vLLM stand-in per container from the playbook's rendered launch
script (published drafter config, no load delay, on the container's address
and port 8000) and sums VmRSS and Pss (/proc) of every lab process. Peers: a
`sleep` process and one of the lab's own sshd. Each lab lives in a temporary
directory on its own loopback /16, checked free first, and is stopped by PID
(`Lab.down()`) whatever happens.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.container.shell import SH
from orchestrator.container.store import make_drafter_view
from orchestrator.inventory import load_inventory
from orchestrator.lab.cluster import SERVER_PORT, SSH_PORT, Lab, stop_pids
from orchestrator.lab.paths import pid_alive
from orchestrator.plan import TargetPlan, plan_deploy
from orchestrator.playbook import find_playbook, load_playbook

PLAYBOOK = "qwen-dflash"
BIG = (4, 16)
MEMORY_TARGET_MIB = 4096
READY_TIMEOUT = 300.0


def proc_kib(pid: int, file: str, key: str) -> int:
    """A `Key:   N kB` figure from /proc/PID/<file>."""
    for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/{pid}/{file}")


def memory_mib(pids: list[int]) -> tuple[float, float]:
    """Summed VmRSS (shared pages counted in each process) and Pss (shared pages split)."""
    rss = sum(proc_kib(pid, "status", "VmRSS") for pid in pids)
    pss = sum(proc_kib(pid, "smaps_rollup", "Pss") for pid in pids)
    return rss / 1024, pss / 1024


def lab_addresses(network: str, hosts: int, per_host: int) -> list[tuple[str, int]]:
    """Every address and port a lab of that size listens on (sshd and vLLM)."""
    taken = [(f"{network}.{h}.1", SSH_PORT) for h in range(1, hosts + 1)]
    for h in range(1, hosts + 1):
        for j in range(per_host):
            taken += [
                (f"{network}.{h}.{10 + j}", SSH_PORT),
                (f"{network}.{h}.{10 + j}", SERVER_PORT),
            ]
    return taken


def require_free(network: str, hosts: int, per_host: int) -> None:
    for address, port in lab_addresses(network, hosts, per_host):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as exc:
                sys.exit(f"{address}:{port} is taken ({exc.strerror}): choose another network")


def orch_seconds(*args: str) -> float:
    """Wall time of the real CLI in its own process."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - started


def lab_up_args(root: Path, network: str, hosts: int, per_host: int) -> list[str]:
    sizes = ["--hosts", str(hosts), "--containers-per-host", str(per_host)]
    return ["lab", "up", "--dir", str(root), "--network", network, "--load-seconds", "0", *sizes]


def write_release(plan: TargetPlan) -> Path:
    """The release a deploy would write: rendered files and the drafter view."""
    release = Path(plan.release_dir)
    release.mkdir(parents=True)
    for name, data in plan.files.items():
        (release / name).write_bytes(data)
    view = make_drafter_view(plan.drafter_weights, plan.drafter_view)
    subprocess.run(view, check=True)
    return release


def start_server(release: Path) -> subprocess.Popen:
    """The launch script execs the container's `vllm`: the PID is the server's."""
    with (release / "server.log").open("ab") as log:
        return subprocess.Popen(
            [SH, str(release / "serve.sh")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def healthy(address: str, port: int) -> bool:
    connection = http.client.HTTPConnection(address, port, timeout=2)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def wait_all_ready(servers: dict[str, tuple[subprocess.Popen, str]]) -> None:
    waiting = dict(servers)
    deadline = time.monotonic() + READY_TIMEOUT
    while waiting:
        if time.monotonic() > deadline:
            raise RuntimeError(f"not ready after {READY_TIMEOUT:.0f} s: {sorted(waiting)}")
        for name, (process, address) in list(waiting.items()):
            if process.poll() is not None:
                raise RuntimeError(f"{name}: stand-in exited with {process.returncode}")
            if healthy(address, SERVER_PORT):
                del waiting[name]
        time.sleep(0.1)


def stop_processes(processes: list[subprocess.Popen]) -> None:
    stop_pids([process.pid for process in processes if process.poll() is None])
    for process in processes:
        process.wait()


def default_lab_times(tmp: Path, network: str, runs: int) -> tuple[float, float]:
    """Median up and down seconds of fresh default labs."""
    ups, downs = [], []
    for run in range(runs):
        root = tmp / f"default-{run}"
        lab = Lab(root)
        try:
            ups.append(orch_seconds(*lab_up_args(root, network, 1, 2)))
            downs.append(orch_seconds("lab", "down", "--dir", str(root)))
        finally:
            lab.down()
    return statistics.median(ups), statistics.median(downs)


def big_lab_figures(tmp: Path, network: str) -> dict[str, float]:
    hosts, per_host = BIG
    root = tmp / "big"
    lab = Lab(root)
    processes: list[subprocess.Popen] = []
    try:
        figures = {"up": orch_seconds(*lab_up_args(root, network, hosts, per_host))}
        sshd_pids = [node.pid for node in lab.nodes()]
        plans = plan_deploy(load_playbook(find_playbook(PLAYBOOK)), load_inventory(lab.inventory))
        started = time.perf_counter()
        servers = {}
        for plan in plans:
            process = start_server(write_release(plan))
            processes.append(process)
            servers[plan.container] = (process, plan.address)
        wait_all_ready(servers)
        figures["servers ready"] = time.perf_counter() - started
        time.sleep(1.0)
        server_pids = [process.pid for process in processes]
        figures["sshd count"] = len(sshd_pids)
        figures["sshd rss"], figures["sshd pss"] = memory_mib(sshd_pids)
        figures["server count"] = len(server_pids)
        figures["server rss"], figures["server pss"] = memory_mib(server_pids)
        figures["down"] = orch_seconds("lab", "down", "--dir", str(root))
        figures["left running"] = sum(pid_alive(pid) for pid in [*sshd_pids, *server_pids])
        return figures
    finally:
        lab.down()
        stop_processes(processes)


def sleep_memory_mib() -> tuple[float, float]:
    process = subprocess.Popen(["sleep", "600"])
    try:
        time.sleep(0.2)
        return memory_mib([process.pid])
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="default-lab up/down repetitions")
    parser.add_argument("--network", default="127.200", help="loopback /16 of the default lab")
    parser.add_argument("--big-network", default="127.201", help="loopback /16 of the big lab")
    args = parser.parse_args()
    require_free(args.network, 1, 2)
    require_free(args.big_network, *BIG)
    sleep_rss, sleep_pss = sleep_memory_mib()
    with tempfile.TemporaryDirectory() as tmp:
        up, down = default_lab_times(Path(tmp), args.network, args.runs)
        big = big_lab_figures(Path(tmp), args.big_network)
    hosts, per_host = BIG
    print("orch lab up / down, wall seconds of the CLI process")
    print(f"  {'lab':<40} {'up s':>6} {'down s':>7}")
    print(f"  {f'1 host x 2 containers (median of {args.runs})':<40} {up:6.2f} {down:7.2f}")
    big_label = f"{hosts} hosts x {per_host} containers, {hosts * per_host} servers"
    print(f"  {big_label:<40} {big['up']:6.2f} {big['down']:7.2f}")
    ready = big["servers ready"]
    print(f"  {hosts * per_host} stand-ins started until all /health 200: {ready:.1f} s")
    print(f"  processes left running after lab down: {big['left running']:.0f}")
    sshd_mib = big["sshd rss"] / big["sshd count"]
    print(f"\nresident memory, {hosts} x {per_host} lab with a vLLM stand-in per container")
    print(
        f"  {'processes':<24} {'count':>5} {'VmRSS MiB':>10} {'Pss MiB':>8}"
        f" {'RSS/proc':>9} {'x sleep':>8} {'x sshd':>7}"
    )

    def row(label: str, count: float, rss: float, pss: float) -> None:
        each = rss / count
        print(
            f"  {label:<24} {count:5.0f} {rss:10.1f} {pss:8.1f}"
            f" {each:9.1f} {each / sleep_rss:8.1f} {each / sshd_mib:7.1f}"
        )

    row("sleep (peer)", 1, sleep_rss, sleep_pss)
    row("sshd (peer)", big["sshd count"], big["sshd rss"], big["sshd pss"])
    row("vllm stand-in", big["server count"], big["server rss"], big["server pss"])
    total_rss = big["sshd rss"] + big["server rss"]
    total_pss = big["sshd pss"] + big["server pss"]
    count = big["sshd count"] + big["server count"]
    row("all lab processes", count, total_rss, total_pss)
    verdict = "under" if total_rss < MEMORY_TARGET_MIB else "OVER"
    print(f"  total VmRSS {total_rss / 1024:.2f} GiB: {verdict} the 4 GiB target")


if __name__ == "__main__":
    main()
