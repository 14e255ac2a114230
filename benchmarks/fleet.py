"""A fleet deploy at 1, 4, 16 and 64 containers with the same `rollout.parallel`.

Run: `.venv/bin/python benchmarks/fleet.py [--sizes 1,4,16,64] [--parallel 16]
[--tokens-per-second N]`.
For each size, a fresh lab of 4 hosts x 16 containers (sshd at OpenSSH's
defaults: MaxSessions 10, MaxStartups 10:30:100; every second container with
its own sshd; stand-ins load in 0 s) and one `orch deploy qwen-dflash --json
--set rollout.parallel=P --limit ...` of that many containers, taken round
robin over the hosts (4 = one per host), in its own process with
ORCH_STATE_DIR in a temporary directory. Prints per size: exit code and
results, wall seconds, the orch process's own CPU seconds (its rusage from
wait4: orch starts no children, so this is orch alone) per container, the
lab's CPU seconds (every lab sshd's reaped descendants: login shells, pct,
the commands, the stand-in's answers to the server check; plus the vLLM
stand-ins), SSH connections accepted per sshd (`Accepted publickey` lines),
and the peak session channels orch held on each host's connection with the
commands that queued for one. Then each size's wall time over the smallest's,
the seconds of the canary and of each wave, each step's median (and max) per
container, what one `pct exec` costs the lab (the sh hot path against the Python
stand-in it replaced) and what one command costs on orch's SSH connection with
TCP_NODELAY and without it (median of 30 each).
Every lab is stopped by PID (`Lab.down()`); only loopback addresses are used.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lab import require_free

from orchestrator.inventory import load_inventory
from orchestrator.lab.cluster import Lab, LabSpec
from orchestrator.lab.paths import (
    DEFAULT_TOKENS_PER_SECOND,
    PCT_MODULE,
    ContainerPaths,
    server_records,
)
from orchestrator.transport.ssh import SshTransport

PLAYBOOK = "qwen-dflash"
HOSTS, PER_HOST = 4, 16
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def round_robin(lab: Lab, count: int) -> list[str]:
    """`count` containers, one host after another: ct200, ct300, ct400, ct500, ct201..."""
    by_host: dict[str, list[str]] = {}
    for container in lab.containers():
        by_host.setdefault(container.host, []).append(container.name)
    columns = zip(*by_host.values(), strict=True)
    return [name for column in columns for name in column][:count]


def cpu_seconds(pid: int, fields: slice) -> float:
    """utime+stime (fields 14, 15) or cutime+cstime (16, 17) of /proc/PID/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    values = stat.rsplit(")", 1)[1].split()[11:15]  # utime, stime, cutime, cstime
    return sum(int(v) for v in values[fields]) / CLOCK_TICKS


def lab_cpu(lab: Lab) -> dict[str, float]:
    """CPU seconds of each sshd's reaped descendants (sessions, login shells, pct, the
    commands, nvidia-smi) and of the running vLLM stand-ins."""
    servers = [
        record["pid"]
        for container in lab.containers()
        for record in server_records(ContainerPaths(Path(container.root)))
    ]
    return {
        "sshd": sum(cpu_seconds(node.pid, slice(0, 4)) for node in lab.nodes()),
        "servers": sum(cpu_seconds(pid, slice(0, 2)) for pid in servers),
    }


def accepted(lab: Lab) -> dict[str, int]:
    return {
        node.name: Path(node.log).read_text(errors="replace").count("Accepted publickey")
        for node in lab.nodes()
    }


def deploy(lab: Lab, env: dict[str, str], names: list[str], parallel: int) -> dict:
    argv = [sys.executable, "-m", "orchestrator", "deploy", PLAYBOOK, "-i", str(lab.inventory)]
    argv += ["--json", "--set", f"rollout.parallel={parallel}"]
    for name in names:
        argv += ["--limit", name]
    lab_before = lab_cpu(lab)
    with tempfile.TemporaryFile("w+") as out:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        time.sleep(1)  # each sshd reaps its connection's process tree once orch has gone
        out.seek(0)
        document = json.loads(out.read())
    return {
        "code": os.waitstatus_to_exitcode(status),
        "wall": wall,
        "orch_cpu": usage.ru_utime + usage.ru_stime,
        "lab_cpu": {k: v - lab_before[k] for k, v in lab_cpu(lab).items()},
        "document": document,
    }


def one_size(root: Path, network: str, count: int, parallel: int, tokens_per_second: float) -> dict:
    lab = Lab(root / f"lab{count}")
    env = {**os.environ, "ORCH_STATE_DIR": str(root / f"state{count}"), "NO_COLOR": "1"}
    spec = LabSpec(
        hosts=HOSTS,
        containers_per_host=PER_HOST,
        load_seconds=0,
        network=network,
        tokens_per_second=tokens_per_second,
    )
    try:
        lab.up(spec)
        before = accepted(lab)
        run = deploy(lab, env, round_robin(lab, count), parallel)
        after = accepted(lab)
        run["connections"] = {name: after[name] - before[name] for name in after}
        return run
    finally:
        lab.down()


def command_costs(root: Path, network: str, runs: int = 30) -> dict[str, float]:
    """Median ms of `/bin/true`: through `pct exec` on the host (the sh hot path, the
    Python stand-in it replaced, bare), and as a command on orch's SSH connection to the
    host with TCP_NODELAY (as orch sets it) and without (paramiko's default)."""
    lab = Lab(root / "pct")
    try:
        lab.up(LabSpec(containers_per_host=1, load_seconds=0, network=network))
        host = lab.paths.host("pve1")
        python = [sys.executable, "-m", PCT_MODULE, "--host-dir", str(host.root)]
        commands = {
            "sh hot path (bin/pct)": [str(host.pct), "exec", "200", "--", "/bin/true"],
            "Python stand-in": [*python, "exec", "200", "--", "/bin/true"],
            "/bin/true alone": ["/bin/true"],
        }
        costs = {
            label: median_ms(functools.partial(subprocess.run, argv, check=True), runs)
            for label, argv in commands.items()
        }
        address, settings, label = load_inventory(lab.inventory).login("ct200")
        with contextlib.closing(SshTransport(label, address, settings)) as ssh:
            ssh.run(["/bin/true"])
            sock = ssh.connection.transport.sock
            for nodelay, name in ((1, "SSH command, TCP_NODELAY"), (0, "SSH command, Nagle on")):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, nodelay)
                costs[name] = median_ms(lambda: ssh.run(["/bin/true"]), runs)
        return costs
    finally:
        lab.down()


def median_ms(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def results_text(document: dict) -> str:
    counts: dict[str, int] = {}
    for target in document["targets"]:
        counts[target["result"]] = counts.get(target["result"], 0) + 1
    return ", ".join(f"{n} {result}" for result, n in sorted(counts.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4,16,64")
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--network", default="127.203", help="loopback /16 of the labs")
    parser.add_argument(
        "--tokens-per-second",
        type=float,
        default=DEFAULT_TOKENS_PER_SECOND,
        help="the stand-ins' decode speed per stream (30: field speed, as in deploy.py)",
    )
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    require_free(args.network, HOSTS, PER_HOST)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            runs[size] = one_size(
                Path(tmp), args.network, size, args.parallel, args.tokens_per_second
            )
        costs = command_costs(Path(tmp), args.network)
    load = os.getloadavg()
    print(f"orch deploy {PLAYBOOK}, lab {HOSTS} hosts x {PER_HOST} containers (stock sshd limits),")
    print(
        f"rollout.parallel={args.parallel}, canary 1, stand-ins at {args.tokens_per_second:g} "
        f"tokens/s per stream; load average after: {load[0]:.1f}"
    )
    print("  CPU seconds per container: orch (its own process), the lab's sshd process trees")
    print("  (shells, pct, commands, nvidia-smi stand-ins) and its vLLM stand-ins")
    header = ("containers", "exit", "wall s", "orch CPU s", "orch", "lab sshd", "lab vLLM")
    print("  {:>10} {:>4} {:>8} {:>10} {:>7} {:>9} {:>9}  results".format(*header))
    for size, run in runs.items():
        lab = run["lab_cpu"]
        print(
            f"  {size:10d} {run['code']:4d} {run['wall']:8.1f} {run['orch_cpu']:10.2f}"
            f" {run['orch_cpu'] / size:7.3f} {lab['sshd'] / size:9.2f} {lab['servers'] / size:9.2f}"
            f"  {results_text(run['document'])}"
        )
    first = min(runs)
    for size in sorted(runs)[1:]:
        ratio = runs[size]["wall"] / runs[first]["wall"]
        print(f"  wall({size})/wall({first}) = {ratio:.2f}")
    print("\nSSH per deploy: connections accepted per sshd (hosts; containers' own sshds summed),")
    print("and on each host's connection the peak session channels and commands that queued")
    for size, run in runs.items():
        connections = run["connections"]
        hosts = " ".join(
            f"{h}:{connections[h]}" for h in sorted(connections) if h.startswith("pve")
        )
        own = sum(n for name, n in connections.items() if not name.startswith("pve"))
        sessions = " ".join(
            f"{c['endpoint']}:{c['peak_sessions']}/{c['max_sessions']} queued {c['waited']}"
            for c in run["document"].get("connections", [])
            if c["endpoint"].startswith("pve")
        )
        print(f"  {size:3d} containers: {hosts}; containers' sshds {own}; {sessions}")
    print("\nstages (seconds) per size: the canary, then each wave")
    for size, run in runs.items():
        waves = run["document"].get("rollout", {}).get("waves", [])
        print(f"  {size:3d}: " + " ".join(f"{w['kind']} {w['seconds']:.1f}" for w in waves))
    print("\nwhere a container's time goes: median seconds per step (max in brackets)")
    steps = list(
        dict.fromkeys(
            n for r in runs.values() for t in r["document"]["targets"] for n in t["steps"]
        )
    )
    print("  {:<16}".format("step") + "".join(f" {size:>13}" for size in runs))
    for step in steps:
        cells = []
        for run in runs.values():
            times = [t["steps"][step] for t in run["document"]["targets"] if step in t["steps"]]
            cells.append(f"{statistics.median(times):6.2f} [{max(times):5.2f}]" if times else "")
        print(f"  {step:<16}" + "".join(f" {cell:>13}" for cell in cells))
    print("\none /bin/true on the lab, median of 30 (ms)")
    for label, ms in costs.items():
        print(f"  {label:<24} {ms:7.1f}")


if __name__ == "__main__":
    main()
