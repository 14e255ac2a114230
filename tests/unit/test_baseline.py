"""The baseline record, its fingerprint, and the choice of the speed reference."""

from __future__ import annotations

import json

import pytest

from orchestrator.baseline import (
    BaselineLevel,
    BaselineRecord,
    Fingerprint,
    ReferenceFacts,
    changed_part,
    choose_reference,
    fingerprint_of,
    gpus_text,
    launch_without_speculation,
    parse_record,
    record_json,
)
from orchestrator.container.gpu import parse_gpus
from orchestrator.metrics.speed import Figure

A6000S = "2 x NVIDIA RTX A6000 (49140 MiB)"
NOW = Fingerprint("t1", "0.34.0", "l1", A6000S)
LEVELS = (
    BaselineLevel(1, 12, Figure(40.0, 38.0, 42.0), Figure(40.0, 38.0, 42.0), 1.0),
    BaselineLevel(8, 12, Figure(20.0, 18.0, 22.0), Figure(160.0, 150.0, 170.0), 8.0),
)
BASELINE = BaselineRecord(NOW, LEVELS, "run-b", "2026-12-04T16:00:00+00:00", "gated")
OLD_VLLM = BaselineRecord(Fingerprint("t1", "0.32.0", "l1", A6000S), LEVELS, "run-b", "t", "gated")
REPLACED_GATE = json.dumps(
    {
        "run_id": "run-r",
        "action": "deploy",
        "result": "deployed",
        "release": "old",
        "current": "old",
        "current_gate": {
            "verdict": "pass",
            "speed": {
                "verdict": "not_judged",
                "levels": [
                    {"concurrency": 1, "total_tokens_per_second": {"mean": 50.0}},
                    {"concurrency": 8, "total_tokens_per_second": None},
                ],
            },
        },
    }
)
NO_SPEED = json.dumps({"run_id": "run-s", "current": "old", "current_gate": {"verdict": "pass"}})


@pytest.mark.parametrize(
    ("baseline", "fingerprint", "audit", "gated", "replaced", "kind", "why"),
    [
        (BASELINE, NOW, [REPLACED_GATE], "new", "old", "baseline", "fingerprint matches"),
        (
            OLD_VLLM,
            NOW,
            [REPLACED_GATE],
            "new",
            "old",
            "replaced_release",
            "vLLM 0.32.0, the server is 0.34.0",
        ),
        (OLD_VLLM, NOW, [], "new", "old", None, "baseline measured for vLLM 0.32.0"),
        (
            BASELINE,
            None,
            [REPLACED_GATE],
            "new",
            "old",
            "replaced_release",
            "fingerprint was not read",
        ),
        (None, NOW, [REPLACED_GATE], "new", "old", "replaced_release", "no baseline recorded"),
        ("levels: field required", NOW, [], "new", "old", None, "unreadable (levels"),
        (None, NOW, [NO_SPEED], "new", "old", None, "old has no recorded speed"),
        (None, NOW, [REPLACED_GATE], "old", "old", None, "no release replaced"),
        (None, NOW, [REPLACED_GATE], "new", None, None, "no release replaced"),
        (BASELINE, NOW, [], "old", "old", "baseline", "fingerprint matches"),
    ],
)
def test_the_reference_is_a_matching_baseline_else_the_replaced_release_else_none(
    baseline: BaselineRecord | str | None,
    fingerprint: Fingerprint | None,
    audit: list[str],
    gated: str,
    replaced: str | None,
    kind: str | None,
    why: str,
) -> None:
    choice = choose_reference(ReferenceFacts(baseline, fingerprint, audit), gated, replaced)
    assert (choice.reference.kind if choice.reference else None) == kind
    assert why in choice.why
    if kind is None:
        assert choice.why.endswith("not judged")


def test_a_replaced_release_is_judged_by_the_levels_its_gate_measured() -> None:
    choice = choose_reference(ReferenceFacts(None, NOW, [REPLACED_GATE]), "new", "old")
    assert choice.reference is not None
    assert choice.reference.at(1) == Figure(50.0)
    assert choice.reference.at(8) is None  # recorded without a figure: not a reference
    assert "run-r" in choice.reference.source


def test_a_baseline_reference_carries_each_levels_total() -> None:
    reference = BASELINE.reference()
    assert (reference.kind, reference.at(1), reference.at(8)) == (
        "baseline",
        Figure(40.0, 38.0, 42.0),
        Figure(160.0, 150.0, 170.0),
    )


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({"vllm": "0.34.0"}, "baseline measured for vLLM 0.32.0, the server is 0.34.0"),
        ({"target": "t2"}, "target files t1 (config and weight index), they are now t2"),
        ({"launch": "l2"}, "launch l1 (minus speculation), the launch is now l2"),
        (
            {"gpus": "2 x NVIDIA A100-SXM4-80GB (81920 MiB)"},
            "the GPUs changed: baseline measured on 2 x NVIDIA RTX A6000 (49140 MiB), "
            "nvidia-smi now lists 2 x NVIDIA A100-SXM4-80GB (81920 MiB)",
        ),
    ],
)
def test_a_fingerprint_mismatch_names_the_part_that_changed(
    changed: dict[str, str], named: str
) -> None:
    recorded = Fingerprint("t1", "0.32.0", "l1", A6000S)
    now = Fingerprint(**{**recorded.__dict__, **changed})
    assert named in (changed_part(recorded, now) or "")
    assert changed_part(recorded, recorded) is None


def test_the_record_reads_back_as_written_and_a_torn_one_says_where() -> None:
    assert parse_record(record_json(BASELINE)) == BASELINE
    torn = parse_record(record_json(BASELINE)[:-20])
    assert isinstance(torn, str) and torn
    missing = json.loads(record_json(BASELINE))
    del missing["fingerprint"]["vllm"]
    assert parse_record(json.dumps(missing).encode()) == "fingerprint.vllm: Field required"


LAUNCH = """exec /v/bin/vllm serve /m/t \\
  --speculative-config '{"method": "dflash"}' \\
  --served-model-name t \\
  --per-request-spec-decode-metrics summary \\
  --tensor-parallel-size 1
"""


def test_the_launch_without_speculation_drops_only_its_flags() -> None:
    assert launch_without_speculation(LAUNCH, "serve.sh.j2") == (
        "exec /v/bin/vllm serve /m/t \\\n  --served-model-name t \\\n  --tensor-parallel-size 1\n"
    )
    inline = "exec vllm serve /m/t --speculative-config '{}'\n"
    with pytest.raises(ValueError, match="--speculative-config is not on a line"):
        launch_without_speculation(inline, "serve.sh.j2")


def test_the_gpus_are_named_by_model_and_memory_as_nvidia_smi_lists_them() -> None:
    assert gpus_text([("NVIDIA RTX A6000", 49140)] * 2) == A6000S
    mixed = [("NVIDIA RTX A6000", 49140), ("NVIDIA L40S", 46068), ("NVIDIA RTX A6000", 49140)]
    assert gpus_text(mixed) == "2 x NVIDIA RTX A6000 (49140 MiB), 1 x NVIDIA L40S (46068 MiB)"
    assert (gpus_text(None), gpus_text([])) == ("not read", "none")


def test_other_gpus_of_the_same_memory_no_longer_match_the_baseline() -> None:
    """Two GPU models with 49140 MiB each: the baseline measured on one is no reference
    on the other; the gate falls back to the release it replaces and says why."""

    def on(name: str) -> Fingerprint:
        listed = parse_gpus(
            f"0, GPU-a, 49140, 1, 49139, {name}\n1, GPU-b, 49140, 1, 49139, {name}\n"
        )
        named = [(gpu.name, gpu.total_mib) for gpu in listed]
        return fingerprint_of({"config.json": b"{}"}, "0.32.0", "launch", gpus_text(named))

    measured = BaselineRecord(on("NVIDIA RTX A6000"), LEVELS, "run-b", "t", "gated")
    facts = ReferenceFacts(measured, on("NVIDIA RTX 6000 Ada Generation"), [REPLACED_GATE])
    choice = choose_reference(facts, "new", "old")
    assert choice.reference is not None and choice.reference.kind == "replaced_release"
    assert choice.why.startswith(
        "the GPUs changed: baseline measured on 2 x NVIDIA RTX A6000 (49140 MiB), nvidia-smi "
        "now lists 2 x NVIDIA RTX 6000 Ada Generation (49140 MiB): judged against the release "
        "it replaces, old"
    ), choice.why
    same = ReferenceFacts(measured, on("NVIDIA RTX A6000"), [REPLACED_GATE])
    assert choose_reference(same, "new", "old").reference.kind == "baseline"  # type: ignore[union-attr]
