"""The gate in phases, against real vLLM stand-ins on loopback (no SSH: a socket transport)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator, Sequence

import pytest
from test_lab_standins import (
    DRAFTER_NAME,
    PUBLISHED,
    build_container,
    deploy_drafter,
    samples,
    start_vllm,
    stop_by_pid,
    target_dir,
    wait_ready,
)

from orchestrator.drafters.kinds import get_kind
from orchestrator.gate import (
    GateReport,
    PhaseReport,
    explain_phases,
    overall_verdict,
    run_gate,
)
from orchestrator.metrics.assess import GateCriteria, Verdict, VerdictOutcome
from orchestrator.playbook import Gate, Probe
from orchestrator.probes import load_passages, load_prompts
from orchestrator.probes.context import ContextBucket, context_buckets
from orchestrator.probes.endpoints import Endpoint
from orchestrator.transport.base import Result

CAUSES = get_kind("dflash").failure_causes


class LoopbackTransport:
    """A real TCP stream to the stand-in; the gate only opens streams."""

    label = "loopback"

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        raise AssertionError("the gate runs no commands")

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> socket.socket:
        return socket.create_connection((address, port), timeout)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int | str]]:
    """The published drafter on a healthy server and on one that runs sliding layers fully."""
    container = build_container(tmp_path_factory.mktemp("gate"))
    drafter = deploy_drafter(container, "r1", PUBLISHED, DRAFTER_NAME)
    started: list[subprocess.Popen] = []
    try:
        healthy = start_vllm(started, container, "--gpu-memory-utilization", "0.1", drafter=drafter)
        swa_full = start_vllm(
            started,
            container,
            "--gpu-memory-utilization",
            "0.1",
            drafter=drafter,
            faults={"swa_as_full_attention": True},
        )
        for server in (healthy, swa_full):
            wait_ready(server)
        model = str(target_dir(container))
        yield {"healthy": healthy.port, "swa_full": swa_full.port, "model": model}
    finally:
        for process in started:
            stop_by_pid(process)


def buckets() -> list[ContextBucket]:
    return context_buckets(load_prompts("builtin"), load_passages(), PUBLISHED, 32768, 128)


def gate(**probe: object) -> Gate:
    settings = {
        "max_tokens": 128,
        "scrape_interval": 0.25,
        "chat_template_kwargs": {"enable_thinking": False},
        **probe,
    }
    return Gate(min_drafts=300, time_budget=60, probe=Probe.model_validate(settings))


def probe_gate(servers: dict, name: str, the_gate: Gate) -> GateReport:
    port = servers[name]
    return run_gate(
        LoopbackTransport(), "127.0.0.1", port, servers["model"], the_gate, buckets(), CAUSES
    )


def drafts_counted(port: int) -> float:
    return samples(port)[("vllm:spec_decode_num_drafts_total", "")]


def test_every_bucket_and_endpoint_is_its_own_phase(servers: dict) -> None:
    before = drafts_counted(servers["healthy"])
    report = probe_gate(servers, "healthy", gate())
    assert report.verdict.outcome == "pass", report.verdict.reason
    document = report.to_dict()
    phases = document["by_context"]
    assert [(p["context"], p["endpoint"], p["chat_template_kwargs"]) for p in phases] == [
        ("short", "/v1/completions", None),
        ("short", "/v1/chat/completions", {"enable_thinking": False}),
        ("long", "/v1/completions", None),
        ("long", "/v1/chat/completions", {"enable_thinking": False}),
    ]
    for phase in phases:
        assert phase["verdict"] == "pass"
        assert phase["drafts"] >= 300
        assert 3.5 <= phase["mean_acceptance_length"] <= 5
        low, high = phase["prompt_tokens_seen"]
        assert phase["min_tokens"] <= low <= high
        assert phase["max_tokens"] is None or high <= phase["max_tokens"]
    assert [p["min_tokens"] for p in phases] == [0, 0, 2048, 2048]
    # Each phase counts its own deltas: together never more than the server counted.
    assert sum(p["drafts"] for p in phases) == document["drafts"]
    assert document["drafts"] <= drafts_counted(servers["healthy"]) - before
    assert document["advice"]["num_speculative_tokens"] == 15
    assert document["advice"]["text"] == report.advice.text if report.advice else False
    assert "every phase passed" in document["reason"]


def test_long_contexts_collapse_when_sliding_layers_run_as_full_attention(
    servers: dict,
) -> None:
    report = probe_gate(servers, "swa_full", gate())
    assert report.verdict.outcome == "fail"
    phases = {(p.bucket.name, p.endpoint.name): p for p in report.phases}
    assert [p.verdict.outcome for p in report.phases] == ["pass", "pass", "fail"], [
        p.verdict.reason for p in report.phases
    ]
    short, long = phases["short", "completions"].verdict, phases["long", "completions"].verdict
    assert short.per_position_acceptance[4] > 0.2
    # Not one short-context draft in the long phase's deltas: nothing past position 4.
    assert not any(long.per_position_acceptance[4:])
    assert report.verdict == _with_label_reason(long, report.phases[-1].label)
    assert report.explanation is not None
    assert "past the drafter's 2048-token sliding window" in report.explanation
    assert "full attention" in report.explanation
    assert report.advice is None


def _with_label_reason(verdict: Verdict, label: str) -> Verdict:
    return Verdict(
        verdict.outcome,
        verdict.mean_acceptance_length,
        verdict.lower,
        verdict.upper,
        verdict.per_position_acceptance,
        verdict.drafts,
        f"{label}: {verdict.reason}",
    )


def test_each_phase_has_the_request_budget(servers: dict) -> None:
    the_gate = gate(max_requests=6, endpoints=["chat"])
    the_gate = the_gate.model_copy(update={"min_drafts": 10**9})
    report = probe_gate(servers, "healthy", the_gate)
    assert report.verdict.outcome == "inconclusive"
    assert [p.requests for p in report.phases] == [6, 6]
    assert all("probe requests spent" in p.verdict.reason for p in report.phases)
    assert report.verdict.reason.startswith("short context (0..2047 tokens) via /v1/chat")


def test_time_budget_is_split_between_phases(servers: dict) -> None:
    the_gate = gate(endpoints=["completions"]).model_copy(
        update={"min_drafts": 10**9, "time_budget": 0.6}
    )
    report = probe_gate(servers, "healthy", the_gate)
    assert len(report.phases) == 2
    assert "0.3 s spent before the gate decided" in report.phases[0].verdict.reason


# --- pure: phases to one verdict and explanation ---------------------------------------------

SHORT_BUCKET, LONG_BUCKET = buckets()
CHAT = Endpoint("chat", {"enable_thinking": False})
HEALTHY = (0.8, 0.64, 0.5, 0.38, 0.28)
COLLAPSED = (0.55, 0.25, 0.08, 0.02, 0.0)


def verdict(
    outcome: VerdictOutcome, mean: float, curve: tuple[float, ...], lower: float = 2.0
) -> Verdict:
    return Verdict(outcome, mean, lower, mean + 1, curve, 500, f"{outcome} over 500 drafts")


def phase(bucket: ContextBucket, endpoint: Endpoint, judged: Verdict) -> PhaseReport:
    return PhaseReport(bucket, endpoint, judged)


CRITERIA = GateCriteria(2.5)


def test_a_failed_phase_decides_with_its_own_figures_and_label() -> None:
    phases = [
        phase(SHORT_BUCKET, CHAT, verdict("pass", 4.2, HEALTHY, lower=3.5)),
        phase(LONG_BUCKET, CHAT, verdict("fail", 1.9, COLLAPSED)),
    ]
    overall = overall_verdict(phases, CRITERIA)
    assert (overall.outcome, overall.mean_acceptance_length) == ("fail", 1.9)
    assert overall.reason == (
        "long context (2048..32768 tokens) via /v1/chat/completions (enable_thinking=False):"
        " fail over 500 drafts"
    )
    explanation = explain_phases(phases, overall, CAUSES)
    assert explanation is not None
    assert explanation.startswith(
        "short contexts pass (mean acceptance length 4.20) and long ones collapse"
        " (mean acceptance length 1.90, per-position 0.55, 0.25, 0.08, 0.02, 0.00, ...)"
        " past the drafter's 2048-token sliding window"
    )


def test_a_failed_short_phase_is_explained_by_its_curve() -> None:
    phases = [phase(SHORT_BUCKET, CHAT, verdict("fail", 1.1, (0.08, 0.03, 0.0)))]
    explanation = explain_phases(phases, overall_verdict(phases, CRITERIA), CAUSES)
    assert explanation is not None and "target_layer_ids" in explanation


def test_passing_phases_pool_their_drafts_with_the_weakest_bound() -> None:
    phases = [
        phase(SHORT_BUCKET, CHAT, verdict("pass", 4.2, HEALTHY, lower=3.5)),
        phase(LONG_BUCKET, CHAT, verdict("pass", 4.0, HEALTHY, lower=3.1)),
    ]
    overall = overall_verdict(phases, CRITERIA)
    assert overall.outcome == "pass"
    assert overall.lower == 3.1
    assert overall.reason.startswith("every phase passed (95% lower bounds): short context")
    assert explain_phases(phases, overall, CAUSES) is None


def test_an_undecided_phase_leaves_the_gate_undecided() -> None:
    phases = [
        phase(SHORT_BUCKET, CHAT, verdict("pass", 4.2, HEALTHY)),
        phase(LONG_BUCKET, CHAT, verdict("inconclusive", 2.6, HEALTHY)),
    ]
    assert overall_verdict(phases, CRITERIA).outcome == "inconclusive"


def test_by_context_json_names_bucket_endpoint_and_template_settings() -> None:
    entry = phase(LONG_BUCKET, CHAT, verdict("fail", 1.9, COLLAPSED)).to_dict()
    assert entry == {
        "context": "long",
        "min_tokens": 2048,
        "max_tokens": 32768,
        "endpoint": "/v1/chat/completions",
        "chat_template_kwargs": {"enable_thinking": False},
        "prompt_tokens_seen": None,
        "drafts": 500,
        "mean_acceptance_length": 1.9,
        "lower": 2.0,
        "upper": 2.9,
        "per_position_acceptance": list(COLLAPSED),
        "verdict": "fail",
        "reason": "fail over 500 drafts",
        "note": "the drafter's sliding window is 2048 tokens",
        "requests": 0,
        "request_errors": 0,
        "seconds": 0.0,
    }


def test_prompts_the_server_counted_outside_the_bucket_are_noted() -> None:
    counted = phase(LONG_BUCKET, CHAT, verdict("pass", 4.2, HEALTHY))
    counted.prompt_tokens = (1900, 2300)
    assert counted.to_dict()["note"] == (
        "the drafter's sliding window is 2048 tokens;"
        " the server counted 1900..2300 prompt tokens: outside this bucket"
    )
    counted.prompt_tokens = (2100, 2300)
    assert counted.to_dict()["note"] == "the drafter's sliding window is 2048 tokens"
