"""Speculative decoding's speedup on the real vLLM (CPU build), by drafter and concurrency.

Run: `ORCH_VLLM_VENV=... .venv/bin/python benchmarks/speed.py [--json]`. For each
target it starts the real server without speculation, then with each of its
`draft_model` drafters (k = 3), one server at a time, and measures 1 and 8
concurrent streams (`orchestrator/lab/speedprobe.py`: rounds of streamed greedy
completions, each figure with its 95% bound over the rounds). Prints each server's
start time and, per level, per-stream and total output tokens/s, output tokens per
CPU-second of the server, the acceptance length the server counted, the speedups over
the same target without speculation (of total tokens/s and of tokens per CPU-second,
each bounded by the ratio of opposite bounds), what the stand-in's step costs predict
(`orchestrator/lab/speed_costs.yaml`, at the measured acceptance), and the machine's
1-minute load average; the step costs these figures fit; then the stand-in's speedups
at field speed. `--json` prints one object instead; `--replay FILE` prints an earlier
one's figures again with today's step costs.

On each server the gate's own speed phase runs too (`speedprobe.gate_speed`: the code a
deploy's gate runs, with the gate of the target's lab playbook, `lab-deep-draft` or
`lab-draft-model`), and each drafter's phase is judged against its target's without a
drafter by the gate's own judgement (`gate.speed.judge_speed`, as against a baseline):
per level the speedup with its bound and the verdict; per drafter the seconds the phase
took, the requests and output tokens its bounds needed. The same runs on the vLLM
stand-in at field speed (`speed_costs.yaml`'s field-dflash, steps of 5 ms): the
target alone and with the published DFlash drafter (k = 15), at 1, 8 and 32 streams.

The lab's models (`orchestrator/lab/tiny_models.py`) are made, or found in the
cache, first: their make time is printed too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pydantic
import yaml
from standin import build as build_standin_container
from standin import stop as stop_standin
from standin import wait_ready as wait_standin

from orchestrator.contract import jsonable
from orchestrator.gate.report import SpeedReport
from orchestrator.gate.speed import criteria_of, judge_speed
from orchestrator.lab import realserver, speedprobe, step_cost, tiny_cache, tiny_models
from orchestrator.lab.speedprobe import Bounded
from orchestrator.metrics.speedup import ReferenceLevel, SpeedReference
from orchestrator.playbook import Gate

K = 3
CASES = {
    tiny_models.DEEP_TARGET: (
        tiny_models.DEEP_DRAFT,
        tiny_models.DEEP_DRAFT_PERTURBED,
        tiny_models.DEEP_TARGET,
    ),
    tiny_models.TARGET: (tiny_models.TARGET,),
}
"""Each target and the drafters measured against it: the deep target's cheap drafters
and itself (agrees fully, each draft costs a target pass), the tiny target itself."""
PROFILES = {
    tiny_models.DEEP_DRAFT: "cpu-deep-draft",
    tiny_models.DEEP_DRAFT_PERTURBED: "cpu-deep-draft",
    tiny_models.TARGET: "cpu-tiny-self",
}
"""The stand-in profile stating each drafter's costs (the perturbed drafter costs what
the exact one does: same shape); the deep target drafting for itself has none."""
PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"
GATES = {tiny_models.DEEP_TARGET: "lab-deep-draft", tiny_models.TARGET: "lab-draft-model"}
"""The lab playbook whose gate runs the speed phase on each target's servers."""
FIELD_GATE = ("qwen-dflash", [1, 8, 32])
"""The stand-in's gate: qwen-dflash's, at levels either side of the field shape's
crossing (between 8 and 16 streams)."""
FIELD_TOKENS_PER_SECOND = 200.0
"""The stand-in's single-stream speed: steps of 5 ms, long beside a thread's wake-up."""
SPEED_REPORT = pydantic.TypeAdapter(SpeedReport)
FITTED_BY = {"cpu-deep-draft": tiny_models.DEEP_DRAFT, "cpu-tiny-self": tiny_models.TARGET}
"""The drafter whose figures fit each CPU profile."""
FIELD = ("field-dflash", 15, 6.36)
"""The stand-in at field speed: its profile, DFlash b16's k and its published acceptance
length (see speed_costs.yaml)."""
FIELD_LEVELS = (1, 4, 8, 16, 32)


def bound_text(value: Bounded, digits: int = 1) -> str:
    if value.low is None or value.high is None:
        return f"{value.mean:.{digits}f}"
    return f"{value.mean:.{digits}f} [{value.low:.{digits}f}, {value.high:.{digits}f}]"


def playbook_gate(playbook: str, levels: list[int] | None = None) -> Gate:
    """The gate section of a playbook in playbooks/, at other speed levels if given."""
    section = yaml.safe_load((PLAYBOOKS / f"{playbook}.yaml").read_text())["gate"]
    if levels:
        section["speed"] = {**section.get("speed", {}), "concurrency": levels}
    return Gate.model_validate(section)


def measure(venv: Path, models: Path, levels: list[tuple[int, int]], max_tokens: int) -> dict:
    """Every target without and with each of its drafters: start seconds, figures and
    the gate's speed phase."""
    log = Path(f"/tmp/orch-speed-{int(time.time())}.log")
    servers: dict = {}
    for target, drafters in CASES.items():
        gate = playbook_gate(GATES[target])
        for drafter in (None, *drafters):
            run = speedprobe.measure_server(
                venv,
                models / target,
                models / drafter if drafter else None,
                K,
                levels,
                max_tokens,
                log,
                gate,
            )
            servers[f"{target}+{drafter or 'none'}"] = {
                "target": target,
                "drafter": drafter,
                "start_seconds": round(run.start_seconds, 1),
                "levels": [asdict(f) for f in run.levels],
                "gate_speed": jsonable(run.gate),
            }
    return servers


def judged(phase: dict, baseline: dict, gate: Gate, source: str) -> dict:
    """A drafter's speed phase judged by the gate against the phase without a drafter
    (as against a baseline): its figures, speedups, verdicts, as a gate records them."""
    report = SPEED_REPORT.validate_python(phase)
    reference = SpeedReference(
        "baseline",
        source,
        tuple(
            ReferenceLevel(level.concurrency, level.total_tokens_per_second)
            for level in SPEED_REPORT.validate_python(baseline).levels
            if level.total_tokens_per_second is not None
        ),
    )
    judge_speed(report, reference, criteria_of(gate.speed))
    return jsonable(report)


def gate_verdicts(servers: dict) -> list[dict]:
    """Each drafter's speed phase, judged against its target's without a drafter."""
    verdicts = []
    for name, server in servers.items():
        if server["drafter"] is None or not server.get("gate_speed"):
            continue
        gate = playbook_gate(GATES[server["target"]])
        baseline = servers[f"{server['target']}+none"]["gate_speed"]
        source = f"{server['target']} served without a drafter"
        verdicts.append({"server": name, **judged(server["gate_speed"], baseline, gate, source)})
    return verdicts


@contextlib.contextmanager
def standin_serving(container_vllm: Path, target: Path, spec: dict | None) -> Iterator[int]:
    """The vLLM stand-in at field speed (field-dflash step costs), ready: its port."""
    port = speedprobe.free_port()
    argv = [str(container_vllm), "serve", str(target), "--port", str(port)]
    argv += ["--served-model-name", speedprobe.SERVED_NAME, "--load-seconds", "0.2"]
    argv += ["--tokens-per-second", str(FIELD_TOKENS_PER_SECOND), "--step-costs", FIELD[0]]
    if spec:
        argv += ["--speculative-config", json.dumps(spec)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_standin(port, process)
        yield port
    finally:
        stop_standin(process)


def field_gate() -> dict:
    """The gate's speed phase on the stand-in at field speed, without and with the
    published DFlash drafter, the drafter's judged against the target's alone."""
    playbook, levels = FIELD_GATE
    gate = playbook_gate(playbook, levels)
    with tempfile.TemporaryDirectory(prefix="orch-speed-field-") as work:
        container, target, drafter = build_standin_container(Path(work))
        spec = {"method": "dflash", "model": str(drafter), "num_speculative_tokens": FIELD[1]}
        phases = {}
        for name, config in (("none", None), ("dflash", spec)):
            with standin_serving(container.vllm, target, config) as port:
                report = speedprobe.gate_speed(port, speedprobe.SERVED_NAME, gate)
                phases[name] = jsonable(report)
    source = "the stand-in served without a drafter"
    return {
        "gate": playbook,
        "tokens_per_second": FIELD_TOKENS_PER_SECOND,
        "target": phases["none"],
        "dflash": judged(phases["dflash"], phases["none"], gate, source),
    }


def speedups(servers: dict) -> list[dict]:
    """Each drafter's measured speedup per level beside the stand-in's prediction."""
    rows = []
    for name, server in servers.items():
        if server["drafter"] is None:
            continue
        baseline = servers[f"{server['target']}+none"]
        profile = PROFILES.get(server["drafter"])
        costs = step_cost.profile(profile) if profile else None
        for spec, base in zip(server["levels"], baseline["levels"], strict=True):
            measured = speedprobe.ratio_bound(Bounded(**spec["total"]), Bounded(**base["total"]))
            per_cpu = speedprobe.ratio_bound(
                Bounded(**spec["per_cpu_second"]), Bounded(**base["per_cpu_second"])
            )
            per_stream = speedprobe.ratio_bound(
                Bounded(**spec["per_stream"]), Bounded(**base["per_stream"])
            )
            acceptance = spec["acceptance_length"]
            rows.append(
                {
                    "server": name,
                    "streams": spec["streams"],
                    "acceptance_length": acceptance,
                    "speedup": asdict(measured),
                    "per_stream_speedup": asdict(per_stream),
                    "cpu_speedup": asdict(per_cpu),
                    "predicted": round(costs.speedup(spec["streams"], K, acceptance), 2)
                    if acceptance and costs
                    else None,
                    "load": [spec["load"][0], base["load"][0]],
                }
            )
    return rows


def fitted_costs(servers: dict) -> dict[str, dict[str, float]]:
    """What each CPU profile's one-stream parameters come to on these figures, in output
    tokens per CPU-second of the server (which load moves least): the target's
    token_share from its tokens at 1 and 8 streams without a drafter
    (8 / (1 + 7 t) = at 8 / at 1), a drafted position's cost from the drafter's speedup
    at one stream (acceptance / (1 + k t + k c)). The drafter's own token_share is read
    at 8 streams; speed_costs.yaml says how each parameter in use was chosen."""
    fitted = {}
    for profile, drafter in FITTED_BY.items():
        spec = next(s for s in servers.values() if s["drafter"] == drafter)
        base = servers[f"{spec['target']}+none"]["levels"]
        one, eight = base[0]["per_cpu_second"]["mean"], base[1]["per_cpu_second"]["mean"]
        share = min(max((8 * one / eight - 1) / 7, 0.0), 1.0)
        level = spec["levels"][0]
        ratio = level["acceptance_length"] * one / level["per_cpu_second"]["mean"]
        position = max((ratio - 1 - K * share) / K, 0.0)
        fitted[profile] = {"token_share": round(share, 3), "draft_position": round(position, 3)}
    return fitted


def field_speedups() -> list[dict]:
    name, k, acceptance = FIELD
    costs = step_cost.profile(name)
    return [
        {"streams": streams, "speedup": round(costs.speedup(streams, k, acceptance), 2)}
        for streams in FIELD_LEVELS
    ]


def print_tables(result: dict) -> None:
    print(f"models: made in {result['make_seconds']:.1f} s (0 when cached), {result['models']}")
    print(
        f"\n{'server':<36} {'start s':>7} {'streams':>7} {'per-stream tok/s':>24} "
        f"{'total tok/s':>26} {'tok/CPU-s':>24} {'accept':>6} {'load':>5}"
    )
    for name, server in result["servers"].items():
        for level in server["levels"]:
            acceptance = level["acceptance_length"]
            print(
                f"{name:<36} {server['start_seconds']:7.1f} {level['streams']:7d} "
                f"{bound_text(Bounded(**level['per_stream'])):>24} "
                f"{bound_text(Bounded(**level['total'])):>26} "
                f"{bound_text(Bounded(**level['per_cpu_second'])):>24} "
                f"{acceptance if acceptance is None else round(acceptance, 2)!s:>6} "
                f"{level['load'][0]:5.1f}"
            )
    print(
        f"\n{'drafter':<36} {'streams':>7} {'speedup (total)':>22} {'per-stream':>22} "
        f"{'per CPU-s':>22} {'stand-in':>8} {'load':>9}"
    )
    for row in result["speedups"]:
        print(
            f"{row['server']:<36} {row['streams']:7d} "
            f"{bound_text(Bounded(**row['speedup']), 2):>22} "
            f"{bound_text(Bounded(**row['per_stream_speedup']), 2):>22} "
            f"{bound_text(Bounded(**row['cpu_speedup']), 2):>22} "
            f"{row['predicted']!s:>8} {row['load'][0]:4.1f}/{row['load'][1]:<4.1f}"
        )
    print("\nstep costs fitted to these figures (speed_costs.yaml states the ones in use):")
    for profile, parameters in result["fitted"].items():
        print(f"  {profile}: " + ", ".join(f"{k} {v}" for k, v in parameters.items()))
    name, k, acceptance = FIELD
    print(f"\nstand-in at field speed ({name}, k={k}, acceptance {acceptance}):")
    print("  " + "  ".join(f"{r['streams']} streams {r['speedup']:.2f}x" for r in result["field"]))
    print_gate(result)


def figure_text(figure: dict | None, digits: int = 2) -> str:
    if not figure:
        return "-"
    if figure.get("lower") is None or figure.get("upper") is None:
        return f"{figure['mean']:.{digits}f}"
    low, high = figure["lower"], figure["upper"]
    return f"{figure['mean']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def print_phases(phases: list[tuple[str, dict]]) -> None:
    """Each judged speed phase: per level, then the phase's verdict and cost."""
    print(
        f"{'drafter':<36} {'streams':>7} {'total tok/s':>24} {'speedup':>22} "
        f"{'verdict':>12} {'requests':>8} {'tokens':>7} {'seconds':>7}"
    )
    for name, phase in phases:
        for level in phase["levels"]:
            print(
                f"{name:<36} {level['concurrency']:7d} "
                f"{figure_text(level['total_tokens_per_second'], 1):>24} "
                f"{figure_text(level['speedup']):>22} {level['verdict']:>12} "
                f"{level['requests']:8d} {level['output_tokens']:7d} {level['seconds']:7.1f}"
            )
        print(
            f"{name:<36} {'phase':>7} {'':>24} {'':>22} {phase['verdict']:>12} "
            f"{phase['requests']:8d} {phase['output_tokens']:7d} {phase['seconds']:7.1f}"
        )


def print_gate(result: dict) -> None:
    if result.get("gate"):
        print(
            "\nthe gate's speed phase on the real server (the lab playbook's gate; judged by "
            "the gate against the target without a drafter; a passing phase's seconds, "
            "requests and output tokens are what it adds to a passing gate):"
        )
        print_phases([(row["server"], row) for row in result["gate"]])
    field = result.get("field_gate")
    if field:
        print(
            f"\nthe gate's speed phase on the stand-in at field speed ({FIELD[0]}, "
            f"{field['tokens_per_second']:g} tok/s a stream alone, {field['gate']}'s gate):"
        )
        print_phases([("target alone", field["target"]), ("dflash k=15", field["dflash"])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds-1", type=int, default=8, help="measured rounds at 1 stream")
    parser.add_argument("--rounds-8", type=int, default=4, help="measured rounds at 8 streams")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument(
        "--field-only",
        action="store_true",
        help="only the stand-in at field speed (no real server)",
    )
    parser.add_argument(
        "--replay",
        type=Path,
        help="no server: the figures of an earlier --json run, with today's step costs",
    )
    args = parser.parse_args()
    if args.replay:
        try:
            result = json.loads(args.replay.read_text())
            result["speedups"] = speedups(result["servers"])
            result["gate"] = gate_verdicts(result["servers"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            sys.exit(f"{args.replay}: not the JSON of a speed.py run: {error!r}")
    elif args.field_only:
        result = {"field": field_speedups(), "field_gate": field_gate()}
        if args.json:
            json.dump(result, sys.stdout, indent=2)
            print()
        else:
            print_gate(result)
        return
    else:
        venv = realserver.require_venv()
        started = time.monotonic()
        models = tiny_cache.ensure_made(venv)
        result = {
            "vllm": realserver.server_version(venv),
            "models": str(models),
            "make_seconds": round(time.monotonic() - started, 1),
            "k": K,
            "max_tokens": args.max_tokens,
            "servers": measure(
                venv, models, [(1, args.rounds_1), (8, args.rounds_8)], args.max_tokens
            ),
        }
        result["speedups"] = speedups(result["servers"])
        result["gate"] = gate_verdicts(result["servers"])
        result["field_gate"] = field_gate()
    result["fitted"] = fitted_costs(result["servers"])
    result["field"] = field_speedups()
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_tables(result)


if __name__ == "__main__":
    main()
