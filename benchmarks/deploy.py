"""Where one `orch deploy` spends its time, the SSH connections it opens, and the gate's drafts.

Run: `.venv/bin/python benchmarks/deploy.py [--ssh-runs N] [--tokens-per-second N]`.
On a fresh default lab (1 host x 2 containers, stand-ins load in 0 s, playbook
defaults; `--tokens-per-second 30` decodes at field speed, a 27B target on
two A6000 without speculation) runs the real CLI twice, each in its own
process with ORCH_STATE_DIR in a temporary directory: `orch deploy
qwen-dflash --json` (the published drafter config), then the guessed
`target_layer_ids` with `--force --limit ct200`.
Prints the wall time split into the steps the JSON document reports (a
rollback's own steps carry a `rollback ` prefix), the gates' share, the
drafts each gate needed to decide, each gate phase (context bucket and
endpoint) with the seconds to its verdict, and the SSH connections each sshd
accepted (its log's `Accepted publickey` lines) during each deploy.
Peer: the median round trip of a plain `ssh ... true` to the same sshd.

With `--server vllm` (the real vLLM for CPUs, scripts/setup-vllm.sh, one pct
container): `lab-draft-model` deployed, then the same launch again (the server
check's kept verdict reused), again with `--recheck` (checked, nothing else
changes) and a changed launch as a dry run (checked again). Prints per run the
wall time, preflight's seconds, orch's own share (the wall time but the server's
start-up and the gate's probing: `wait ready`, `gate`, `settle`) and the server
check's share (preflight with the check less preflight with the kept verdict).
The lab is stopped by PID (`Lab.down()`) whatever happens.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab import require_free

from orchestrator.lab.cluster import Lab, LabSpec, Node
from orchestrator.lab.paths import DEFAULT_TOKENS_PER_SECOND

PLAYBOOK = "qwen-dflash"
GUESSED_IDS = "drafter.overrides.dflash_config.target_layer_ids=[1,17,33,49,63]"


def accepted_per_sshd(nodes: list[Node]) -> dict[str, int]:
    """`Accepted publickey` lines so far in each sshd's log: one per SSH connection."""
    return {
        node.name: Path(node.log).read_text(errors="replace").count("Accepted publickey")
        for node in nodes
    }


def deploy(
    lab: Lab, env: dict[str, str], *args: str, playbook: str = PLAYBOOK
) -> tuple[float, dict, dict[str, int]]:
    """Wall seconds, the JSON document, and SSH connections accepted per sshd meanwhile."""
    before = accepted_per_sshd(lab.nodes())
    argv = [sys.executable, "-m", "orchestrator", "deploy", playbook]
    argv += ["-i", str(lab.inventory), "--json", *args]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if not done.stdout:
        raise RuntimeError(f"deploy printed no JSON (exit {done.returncode}): {done.stderr}")
    after = accepted_per_sshd(lab.nodes())
    return wall, json.loads(done.stdout), {name: after[name] - before[name] for name in after}


def ssh_round_trip(lab: Lab, node: Node) -> float:
    argv = ["ssh", "-i", str(lab.key), "-o", f"UserKnownHostsFile={lab.known_hosts}"]
    argv += ["-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-p", str(node.port)]
    argv += [f"{getpass.getuser()}@{node.address}", "true"]
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started


GATE_STEPS = ("gate", "rollback gate")
SERVER_STEPS = ("wait ready", "gate", "settle", "rollback wait ready", "rollback gate")
"""The server's start-up and the gate's probing: what is not orch's own."""
REAL_PLAYBOOK = "lab-draft-model"
REAL_RUNS = (
    ("first deploy (checked)", ()),
    ("same launch (kept verdict)", ()),
    ("same launch, --recheck", ("--recheck",)),
    ("changed launch, --dry-run", ("--dry-run", "--set", "server.max_model_len=1024")),
)


def real_server(network: str) -> None:
    """The real-server lab's runs (see the module's docstring)."""
    require_free(network, 1, 1)
    with tempfile.TemporaryDirectory() as tmp:
        lab = Lab(Path(tmp) / "lab")
        env = {**os.environ, "ORCH_STATE_DIR": str(Path(tmp) / "state"), "NO_COLOR": "1"}
        try:
            started = time.perf_counter()
            lab.up(LabSpec(server="vllm", containers_per_host=1, network=network))
            up = time.perf_counter() - started
            runs = [
                (label, deploy(lab, env, *args, playbook=REAL_PLAYBOOK))
                for label, args in REAL_RUNS
            ]
        finally:
            lab.down()
    print(f"orch deploy {REAL_PLAYBOOK} on the real-server lab (vLLM for CPUs, lab up {up:.0f} s)")
    header = ("run", "result", "wall s", "preflight", "orch own", "own share", "check")
    print("  {:<28} {:<9} {:>7} {:>9} {:>8} {:>9} {:>6}".format(*header))
    kept = runs[1][1][1]["targets"][0]["steps"]["preflight"]
    for label, (wall, document, _) in runs:
        [target] = document["targets"]
        steps = target["steps"]
        own = wall - sum(steps.get(name, 0.0) for name in SERVER_STEPS)
        check = steps["preflight"] - kept
        print(
            f"  {label:<28} {target['result']:<9} {wall:7.1f} {steps['preflight']:9.2f}"
            f" {own:8.1f} {own / wall:9.0%} {check:6.1f}"
        )
        for note in target["notes"]:
            print(f"    {note}")


def print_steps(label: str, wall: float, document: dict) -> None:
    """One row per step the JSON reports; a rollback's steps are their own rows."""
    targets = document["targets"]
    names = list(dict.fromkeys(name for t in targets for name in t["steps"]))
    print(f"\n{label}: wall {wall:.2f} s, result {document['result']}; steps in seconds")
    print(f"  {'step':<28}" + "".join(f" {t['name']:>11}" for t in targets))
    print(f"  {'result':<28}" + "".join(f" {t['result']:>11}" for t in targets))
    for name in names:
        cells = "".join(f" {t['steps'].get(name, float('nan')):11.2f}" for t in targets)
        print(f"  {name:<28}{cells}")
    sums = [sum(t["steps"].values()) for t in targets]
    print(f"  {'sum of steps':<28}" + "".join(f" {s:11.2f}" for s in sums))
    gates = [sum(t["steps"].get(name, 0.0) for name in GATE_STEPS) for t in targets]
    shares = [gate / s for gate, s in zip(gates, sums, strict=True)]
    print(f"  {'gates / sum of steps':<28}" + "".join(f" {share:11.0%}" for share in shares))
    print(f"  all targets: gates {sum(gates):.2f} s = {sum(gates) / wall:.0%} of the wall time")
    print(f"  wall - all steps (CLI start, connect, report): {wall - sum(sums):.2f} s")


def gate_rows(label: str, document: dict) -> list[tuple[str, str, dict]]:
    rows = []
    for target in document["targets"]:
        rows.append((label, target["name"], target["gate"]))
        if target["rollback_gate"]:
            rows.append(("rollback", target["name"], target["rollback_gate"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ssh-runs", type=int, default=10)
    parser.add_argument("--network", default="127.202", help="loopback /16 of the lab")
    parser.add_argument(
        "--tokens-per-second",
        type=float,
        default=DEFAULT_TOKENS_PER_SECOND,
        help="the stand-ins' decode speed per stream (30: field speed)",
    )
    parser.add_argument(
        "--server", choices=("standin", "vllm"), default="standin", help="vllm: the real one"
    )
    args = parser.parse_args()
    if args.server == "vllm":
        return real_server(args.network)
    require_free(args.network, 1, 2)
    with tempfile.TemporaryDirectory() as tmp:
        lab = Lab(Path(tmp) / "lab")
        env = {**os.environ, "ORCH_STATE_DIR": str(Path(tmp) / "state"), "NO_COLOR": "1"}
        try:
            spec = LabSpec(
                load_seconds=0, network=args.network, tokens_per_second=args.tokens_per_second
            )
            lab.up(spec)
            correct = deploy(lab, env)
            guessed = deploy(lab, env, "--force", "--set", GUESSED_IDS, "--limit", "ct200")
            ssh = {
                node.name: statistics.median(
                    ssh_round_trip(lab, node) for _ in range(args.ssh_runs)
                )
                for node in lab.nodes()
            }
        finally:
            lab.down()
    print(
        f"orch deploy {PLAYBOOK} on a fresh 1 host x 2 container lab, playbook gate defaults,"
        f" stand-ins at {args.tokens_per_second:g} tokens/s per stream"
    )
    print_steps("published drafter config, all targets", correct[0], correct[1])
    print_steps("guessed target_layer_ids, --force --limit ct200", guessed[0], guessed[1])

    print("\ngate: drafts needed to decide")
    header = ("config", "target", "verdict", "drafts", "requests", "mean AL")
    print("  {:<10} {:<7} {:<8} {:>7} {:>9} {:>8}".format(*header))
    rows = gate_rows("published", correct[1]) + gate_rows("guessed", guessed[1])
    for label, name, gate in rows:
        print(
            f"  {label:<10} {name:<7} {gate['verdict']:<8} {gate['drafts']:7d}"
            f" {gate['requests']:9d} {gate['mean_acceptance_length']:8.2f}"
        )

    print("\ngate phases: seconds from a phase's first scrape to its verdict")
    header = ("config", "target", "context", "endpoint", "verdict", "seconds", "drafts", "reqs")
    print("  {:<10} {:<7} {:<7} {:<21} {:<8} {:>7} {:>7} {:>5}  mean AL".format(*header))
    for label, name, gate in rows:
        for phase in gate.get("by_context") or []:
            print(
                f"  {label:<10} {name:<7} {phase['context']:<7} {phase['endpoint']:<21}"
                f" {phase['verdict']:<8} {phase['seconds']:7.2f} {phase['drafts']:7d}"
                f" {phase['requests']:5d}  {phase['mean_acceptance_length']:.2f}"
            )
        whole = f"whole gate, with in-flight requests: {gate['seconds']:.2f} s"
        print(f"  {label:<10} {name:<7} {whole}")

    print("\nSSH connections accepted per sshd during each deploy")
    print(f"  {'sshd':<8} {'published':>10} {'guessed':>8}")
    for name in correct[2]:
        print(f"  {name:<8} {correct[2][name]:10d} {guessed[2][name]:8d}")

    print(f"\nper-command peer: ssh -p 2222 USER@HOST true, median of {args.ssh_runs}")
    wall = correct[0]
    for name, seconds in ssh.items():
        print(
            f"  {name:<8} {seconds * 1000:6.1f} ms; the published deploy's wall time"
            f" = {wall / seconds:.0f} round trips"
        )


if __name__ == "__main__":
    main()
