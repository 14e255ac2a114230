"""The gate in phases, against real vLLM stand-ins on loopback (no SSH: a socket transport)."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import threading
from collections.abc import Iterator

import pytest
from loopback import CAUSES, LoopbackTransport, buckets, gate
from standins import (
    DRAFTER_NAME,
    RENDERED,
    build_container,
    deploy_drafter,
    samples,
    start_vllm,
    stop_by_pid,
    target_dir,
    wait_ready,
    wait_until,
)

from orchestrator.contract import jsonable
from orchestrator.gate import (
    GateReport,
    PhaseReport,
    explain_phases,
    overall_verdict,
    run_gate,
)
from orchestrator.metrics.assess import GateCriteria, Verdict, VerdictOutcome
from orchestrator.playbook import Gate
from orchestrator.playbook_speed import Speed
from orchestrator.probes.context import ContextBucket
from orchestrator.probes.endpoints import Endpoint

PER_REQUEST = ("--per-request-spec-decode-metrics", "summary")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int | str]]:
    """The published drafter on a healthy server and on one that runs sliding layers fully,
    each with and without per-request figures (`_pr`)."""
    container = build_container(tmp_path_factory.mktemp("gate"))
    drafter = deploy_drafter(container, "r1", RENDERED, DRAFTER_NAME)
    started: list[subprocess.Popen] = []
    memory = ("--gpu-memory-utilization", "0.1")
    swa_full = {"swa_as_full_attention": True}
    try:
        running = {
            "healthy": start_vllm(started, container, *memory, drafter=drafter),
            "swa_full": start_vllm(started, container, *memory, drafter=drafter, faults=swa_full),
            "healthy_pr": start_vllm(started, container, *memory, *PER_REQUEST, drafter=drafter),
            "swa_full_pr": start_vllm(
                started, container, *memory, *PER_REQUEST, drafter=drafter, faults=swa_full
            ),
        }
        for server in running.values():
            wait_ready(server)
        yield {
            **{name: server.port for name, server in running.items()},
            "model": str(target_dir(container)),
        }
    finally:
        for process in started:
            stop_by_pid(process)


SOURCES = {"counters": "", "per_request": "_pr"}
"""Each source and the servers that serve it."""
NOTES = {
    "counters": "gate.acceptance_source: counters; /metrics counters count every request the "
    "server handles: other clients' drafts enter the figures",
    "per_request": "gate.acceptance_source: per_request: each response's own figures, which "
    "other clients' requests never enter",
}
"""Why each source was read, as the report says it."""


def probe_gate(servers: dict, name: str, the_gate: Gate) -> GateReport:
    port = servers[name + SOURCES[the_gate.acceptance_source]]
    return run_gate(
        LoopbackTransport(), "127.0.0.1", port, servers["model"], the_gate, buckets(), CAUSES
    )


def drafts_counted(port: int) -> float:
    return samples(port)[("vllm:spec_decode_num_drafts_total", "")]


@pytest.mark.parametrize("source", SOURCES)
def test_every_bucket_and_endpoint_is_its_own_phase(servers: dict, source: str) -> None:
    port = servers["healthy" + SOURCES[source]]
    before = drafts_counted(port)
    report = probe_gate(servers, "healthy", gate(source))
    assert report.verdict.outcome == "pass", report.verdict.reason
    document = jsonable(report)
    assert (document["source"], document["source_note"]) == (source, NOTES[source])
    phases = document["by_context"]
    assert [(p["context"], p["endpoint"], p["chat_template_kwargs"]) for p in phases] == [
        ("short", "/v1/completions", None),
        ("short", "/v1/chat/completions", {"enable_thinking": False}),
        ("long", "/v1/completions", None),
        ("long", "/v1/chat/completions", {"enable_thinking": False}),
    ]
    for phase in phases:
        assert (phase["verdict"], phase["source"]) == ("pass", source)
        assert phase["drafts"] >= 300
        assert 3.5 <= phase["mean_acceptance_length"] <= 5
        low, high = phase["prompt_tokens_seen"]
        assert phase["min_tokens"] <= low <= high
        assert phase["max_tokens"] is None or high <= phase["max_tokens"]
    assert [p["min_tokens"] for p in phases] == [0, 0, 2048, 2048]
    # Each phase counts its own drafts: together never more than the server counted.
    assert sum(p["drafts"] for p in phases) == document["drafts"]
    assert document["drafts"] <= drafts_counted(port) - before
    assert document["advice"]["num_speculative_tokens"] == 15
    assert document["advice"]["text"] == report.advice.text if report.advice else False
    assert "every phase passed" in document["reason"]


@pytest.mark.parametrize("asked", ["per_request", "auto"])
def test_a_server_without_per_request_figures_is_judged_by_counters(
    servers: dict, asked: str
) -> None:
    without = servers["healthy"]  # started without --per-request-spec-decode-metrics
    report = run_gate(
        LoopbackTransport(), "127.0.0.1", without, servers["model"], gate(asked), buckets(), CAUSES
    )
    assert report.verdict.outcome == "pass"
    assert report.source == "counters"
    assert report.note is not None
    assert report.note.startswith(
        f"gate.acceptance_source: {asked}, but the server's responses carry no per-request "
        "figures (the response has no metrics.speculative_decoding): its launch lacks "
        "--per-request-spec-decode-metrics"
    )
    assert report.note.endswith("other clients' drafts enter the figures")
    assert [p.source for p in report.phases] == ["counters"] * 4


@pytest.mark.parametrize("source", SOURCES)
def test_long_contexts_collapse_when_sliding_layers_run_as_full_attention(
    servers: dict, source: str
) -> None:
    report = probe_gate(servers, "swa_full", gate(source))
    assert report.verdict.outcome == "fail"
    phases = {(p.bucket.name, p.endpoint.name): p for p in report.phases}
    outcomes = [p.verdict.outcome for p in report.phases]
    if source == "counters":  # one after another, up to the first failure
        assert outcomes == ["pass", "pass", "fail"], [p.verdict.reason for p in report.phases]
    else:  # all at once: the first failure stops the others
        assert len(outcomes) == 4 and "fail" in outcomes[2:], outcomes
        assert "pass" not in outcomes[2:]
    failed = next(p for p in report.phases if p.verdict.outcome == "fail")
    short, long = phases["short", failed.endpoint.name].verdict, failed.verdict
    assert short.per_position_acceptance[4] > 0.2
    # Not one short-context draft in the long phase's figures: nothing past position 4.
    assert not any(long.per_position_acceptance[4:])
    assert report.verdict == _with_label_reason(long, failed.label)
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


@pytest.mark.parametrize("source", SOURCES)
def test_each_phase_has_the_request_budget(servers: dict, source: str) -> None:
    the_gate = gate(source, max_requests=6, endpoints=["chat"])
    the_gate = the_gate.model_copy(update={"min_drafts": 10**9})
    report = probe_gate(servers, "healthy", the_gate)
    assert report.verdict.outcome == "inconclusive"
    assert [p.requests for p in report.phases] == [6, 6]
    assert all("probe requests spent" in p.verdict.reason for p in report.phases)
    assert report.verdict.reason.startswith("short context (0..2047 tokens) via /v1/chat")


def test_counter_phases_split_the_time_budget(servers: dict) -> None:
    the_gate = gate(endpoints=["completions"]).model_copy(
        update={"min_drafts": 10**9, "time_budget": 0.6}
    )
    report = probe_gate(servers, "healthy", the_gate)
    assert len(report.phases) == 2
    assert "0.3 s spent before the gate decided" in report.phases[0].verdict.reason


def test_per_request_phases_share_the_whole_time_budget(servers: dict) -> None:
    the_gate = gate("per_request", endpoints=["completions"]).model_copy(
        update={"min_drafts": 10**9, "time_budget": 0.6}
    )
    report = probe_gate(servers, "healthy", the_gate)
    assert [p.source for p in report.phases] == ["per_request"] * 2
    for phase in report.phases:
        assert "0.6 s spent before the gate decided" in phase.verdict.reason


def test_a_decided_phase_cancels_its_requests_and_the_server_aborts_them(servers: dict) -> None:
    """Long answers (2000 tokens, about half a second each here): the requests in flight at
    the verdict are cut off, so the server generates far fewer tokens than they asked for
    (no speed phase: its tokens are not the acceptance phases')."""
    port = servers["healthy_pr"]
    tokens = ("vllm:generation_tokens_total", "")
    before = samples(port)[tokens]
    the_gate = gate("per_request", endpoints=["completions"], max_tokens=2000)
    unsped = {"min_drafts": 100, "speed": Speed(enabled=False)}
    report = probe_gate(servers, "healthy", the_gate.model_copy(update=unsped))
    assert report.verdict.outcome == "pass", report.verdict.reason
    cancelled = sum(p.cancelled for p in report.phases)
    assert cancelled > 0
    answered = report.requests - cancelled
    running = ("vllm:num_requests_running", "")
    wait_until(lambda: samples(port)[running] == 0)
    generated = samples(port)[tokens] - before
    assert generated < (answered + cancelled / 2) * 2000


def test_a_phase_shows_its_figures_as_they_come(servers: dict) -> None:
    heard: list[str] = []
    port = servers["healthy_pr"]
    run_gate(
        LoopbackTransport(),
        "127.0.0.1",
        port,
        servers["model"],
        gate("per_request", endpoints=["chat"]),
        buckets(),
        CAUSES,
        tick=heard.append,
    )
    first, last = heard[0].splitlines(), heard[-1].splitlines()
    assert [line.split(":")[0] for line in first] == ["short chat", "long chat"]
    assert re.fullmatch(
        r"short chat: \d+ drafts, mean \d\.\d\d, lower bound \d\.\d\d, required 2\.50 passed",
        last[0],
    ), last


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
    overall = overall_verdict(phases)
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
    explanation = explain_phases(phases, overall_verdict(phases), CAUSES)
    assert explanation is not None and "target_layer_ids" in explanation


def test_passing_phases_pool_their_drafts_with_the_weakest_bound() -> None:
    phases = [
        phase(SHORT_BUCKET, CHAT, verdict("pass", 4.2, HEALTHY, lower=3.5)),
        phase(LONG_BUCKET, CHAT, verdict("pass", 4.0, HEALTHY, lower=3.1)),
    ]
    overall = overall_verdict(phases)
    assert overall.outcome == "pass"
    assert overall.lower == 3.1
    assert overall.reason == "every phase passed: " + "; ".join(
        f"{p.label}: pass over 500 drafts" for p in phases
    )  # each phase's own words: mean, bound and the required minimum (test_metrics_assess)
    assert explain_phases(phases, overall, CAUSES) is None


def test_an_undecided_phase_leaves_the_gate_undecided() -> None:
    phases = [
        phase(SHORT_BUCKET, CHAT, verdict("pass", 4.2, HEALTHY)),
        phase(LONG_BUCKET, CHAT, verdict("inconclusive", 2.6, HEALTHY)),
    ]
    assert overall_verdict(phases).outcome == "inconclusive"


def test_by_context_json_names_bucket_endpoint_and_template_settings() -> None:
    entry = jsonable(phase(LONG_BUCKET, CHAT, verdict("fail", 1.9, COLLAPSED)))
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
        "cancelled_requests": 0,
        "source": "counters",
        "seconds": 0.0,
    }


def test_prompts_the_server_counted_outside_the_bucket_are_noted() -> None:
    counted = phase(LONG_BUCKET, CHAT, verdict("pass", 4.2, HEALTHY))
    counted.prompt_tokens = (1900, 2300)
    assert jsonable(counted)["note"] == (
        "the drafter's sliding window is 2048 tokens;"
        " the server counted 1900..2300 prompt tokens: outside this bucket"
    )
    counted.prompt_tokens = (2100, 2300)
    assert jsonable(counted)["note"] == "the drafter's sliding window is 2048 tokens"


class NoisyClient:
    """Another client on the same server: `streams` requests at a time at a temperature where
    drafts are rarely kept, until stopped (a refused or broken request is tried again)."""

    def __init__(
        self, address: str, port: int, model: str, streams: int, temperature: float
    ) -> None:
        self.address, self.port = address, port
        self.body = json.dumps(
            {"model": model, "prompt": "x " * 50, "max_tokens": 64, "temperature": temperature}
        )
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.answered = 0
        self.steps = self.accepted = 0
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(streams)]

    def _loop(self) -> None:
        while not self.stop.is_set():
            connection = http.client.HTTPConnection(self.address, self.port, timeout=60)
            try:
                connection.request(
                    "POST", "/v1/completions", self.body, {"Content-Type": "application/json"}
                )
                response = connection.getresponse()
                if response.status == 200:
                    drafts = json.loads(response.read())["metrics"]["speculative_decoding"]
                    with self.lock:
                        self.answered += 1
                        self.steps += drafts["num_spec_steps"]
                        self.accepted += drafts["num_accepted_draft_tokens"]
            except OSError:
                self.stop.wait(0.2)
            finally:
                connection.close()

    def __enter__(self) -> NoisyClient:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


NOISE_TEMPERATURE = 2.0
"""The highest temperature vLLM takes from 0.24.0 (sampling_params.py:529-533): the tiny
target's top-1 probability falls to 0.24 there (lab/acceptance.py), so drafts are mostly
rejected."""


def test_other_traffic_flips_a_counter_gate_and_not_a_per_request_one(servers: dict) -> None:
    """Sixteen streams of someone else's poorly drafted requests on the server: its counters
    mix them into every phase, the responses' own figures do not."""
    port = servers["healthy_pr"]
    noise = NoisyClient("127.0.0.1", port, servers["model"], 16, NOISE_TEMPERATURE)
    judged = {}
    with noise:
        wait_until(lambda: noise.answered >= 16, timeout=60)  # under way before the gates
        for source in SOURCES:
            judged[source] = run_gate(
                LoopbackTransport(),
                "127.0.0.1",
                port,
                servers["model"],
                gate(source, endpoints=["completions"]),
                buckets(),
                CAUSES,
            )
        assert all(thread.is_alive() for thread in noise.threads)  # and still, after them
    assert 1 + noise.accepted / noise.steps < 1.5  # what the server accepts of the others'
    per_request, counters = judged["per_request"], judged["counters"]
    assert per_request.verdict.outcome == "pass", per_request.verdict.reason
    assert per_request.verdict.mean_acceptance_length > 3.5
    assert counters.verdict.outcome == "fail", counters.verdict.reason
    assert counters.verdict.mean_acceptance_length < 2.0
