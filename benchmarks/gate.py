"""The gate on per-request figures, all phases at once, beside the sequential gate on counters.

Run: `.venv/bin/python benchmarks/gate.py [--json] [--network 127.203]`.
For each speed (lab: the stand-ins' default 1000 tokens/s per stream; field:
30 tokens/s, a 27B target on two A6000 without speculation), on a fresh default
lab (1 host x 2 containers, stand-ins load in 0 s, playbook gate defaults,
ORCH_STATE_DIR in a temporary directory), the real CLI runs four deploys of
qwen-dflash, each in its own process:
  1. sequential (`--set gate.acceptance_source=counters`), the published config;
  2. sequential, the guessed `target_layer_ids` (`--force --limit ct200`): gate
     fails, rollback to 1;
  3. concurrent (the default, `per_request`), the published config;
  4. concurrent, the guessed ids: gate fails, rollback to 3.
Prints per gate: the gate step's seconds (what the deploy waits), the deciding
phase's seconds to its verdict, drafts and requests used, the deploy's wall
time; for the guessed config, the seconds from the verdict to the rollback's
first step ("rollback stop server" in the run log, minus the gate step's start
and its failed phase's time to verdict). `--json` prints one object,
`{"lab": {...}, "field": {...}}`, each with `sequential_pass_s`,
`concurrent_pass_s` and `rollback_start_after_verdict_s` (the concurrent gate's)
besides the figures above. Labs are stopped by PID whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from datetime import datetime
from pathlib import Path

from deploy import GUESSED_IDS
from deploy import deploy as run_deploy
from lab import require_free

from orchestrator.lab.cluster import Lab, LabSpec
from orchestrator.lab.paths import DEFAULT_TOKENS_PER_SECOND

SEQUENTIAL = ("--set", "gate.acceptance_source=counters")
SPEEDS = {"lab": DEFAULT_TOKENS_PER_SECOND, "field": 30.0}


def deploy(lab: Lab, env: dict[str, str], *args: str) -> tuple[float, dict]:
    """Wall seconds and the JSON document (`deploy.py`'s run, its SSH counts aside)."""
    wall, document, _ = run_deploy(lab, env, *args)
    return wall, document


def step_times(log: Path, container: str) -> dict[str, datetime]:
    """When each step of a container began, from the run log's `step:` records."""
    began: dict[str, datetime] = {}
    for line in log.read_text(errors="replace").splitlines():
        stamp, _, who, label, *rest = [*line.split(" ", 4), ""]
        if who == container and label == "step:":
            began.setdefault(rest[0].split(" (")[0], datetime.fromisoformat(stamp))
    return began


def verdict_seconds(gate: dict) -> float:
    """The deciding phase's time to its verdict (every phase passed: the slowest)."""
    phases = gate["by_context"]
    failed = [p["seconds"] for p in phases if p["verdict"] == "fail"]
    return min(failed) if failed else max(p["seconds"] for p in phases)


def gate_figures(wall: float, document: dict) -> dict:
    targets = document["targets"]
    gates = [t["gate"] for t in targets]
    return {
        "deploy_wall_s": round(wall, 2),
        "gate_step_s": [round(t["steps"]["gate"], 2) for t in targets],
        "verdict_s": [round(verdict_seconds(g), 2) for g in gates],
        "verdicts": [g["verdict"] for g in gates],
        "sources": [g["source"] for g in gates],
        "drafts": [g["drafts"] for g in gates],
        "requests": [g["requests"] for g in gates],
    }


def rollback_after_verdict(document: dict) -> float:
    """Seconds from the failed gate's verdict to the rollback's first step."""
    (target,) = document["targets"]
    began = step_times(Path(document["log"]), target["name"])
    verdict = verdict_seconds(target["gate"])
    waited = (began["rollback stop server"] - began["gate"]).total_seconds()
    return round(waited - verdict, 3)


def measure(network: str, tokens_per_second: float) -> dict:
    require_free(network, 1, 2)
    with tempfile.TemporaryDirectory() as tmp:
        lab = Lab(Path(tmp) / "lab")
        env = {**os.environ, "ORCH_STATE_DIR": str(Path(tmp) / "state"), "NO_COLOR": "1"}
        guessed = ("--force", "--set", GUESSED_IDS, "--limit", "ct200")
        try:
            lab.up(LabSpec(load_seconds=0, network=network, tokens_per_second=tokens_per_second))
            runs = {
                "sequential": deploy(lab, env, *SEQUENTIAL),
                "sequential_guessed": deploy(lab, env, *SEQUENTIAL, *guessed),
                "concurrent": deploy(lab, env),
                "concurrent_guessed": deploy(lab, env, *guessed),
            }
        finally:
            lab.down()
        figures = {name: gate_figures(wall, document) for name, (wall, document) in runs.items()}
        for name in ("sequential_guessed", "concurrent_guessed"):  # run logs: in the state dir
            figures[name]["rollback_after_verdict_s"] = rollback_after_verdict(runs[name][1])
    return {
        "tokens_per_second": tokens_per_second,
        "sequential_pass_s": round(statistics.fmean(figures["sequential"]["gate_step_s"]), 2),
        "concurrent_pass_s": round(statistics.fmean(figures["concurrent"]["gate_step_s"]), 2),
        "rollback_start_after_verdict_s": figures["concurrent_guessed"]["rollback_after_verdict_s"],
        "runs": figures,
    }


def print_speed(name: str, result: dict) -> None:
    ratio = result["concurrent_pass_s"] / result["sequential_pass_s"]
    print(f"\n{name}: stand-ins at {result['tokens_per_second']:g} tokens/s per stream")
    print(
        f"  passing gate (published config), mean of 2 containers: sequential "
        f"{result['sequential_pass_s']:.2f} s, concurrent {result['concurrent_pass_s']:.2f} s"
        f" ({ratio:.2f}x)"
    )
    header = ("run", "wall s", "gate step s", "verdict s", "verdict", "drafts", "requests")
    print("  {:<20} {:>7} {:>13} {:>11} {:>9} {:>13} {:>10}".format(*header))
    for run, figures in result["runs"].items():
        for i, verdict in enumerate(figures["verdicts"]):
            print(
                f"  {run if i == 0 else '':<20} {figures['deploy_wall_s'] if i == 0 else '':>7}"
                f" {figures['gate_step_s'][i]:13.2f} {figures['verdict_s'][i]:11.2f}"
                f" {verdict:>9} {figures['drafts'][i]:13d} {figures['requests'][i]:10d}"
            )
        if "rollback_after_verdict_s" in figures:
            print(
                f"  {'':<20} rollback began {figures['rollback_after_verdict_s']:.2f} s "
                "after the verdict"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="127.203", help="loopback /16 of the labs")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    results = {name: measure(args.network, speed) for name, speed in SPEEDS.items()}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print("orch deploy qwen-dflash: gate on counters, one phase after another, beside the gate")
    print("on per-request figures, all phases at once (fresh 1 host x 2 container lab each)")
    for name, result in results.items():
        print_speed(name, result)


if __name__ == "__main__":
    main()
