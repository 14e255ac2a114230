"""Figures from a hostile server: numbers far beyond any count (10**400, counters summed
over engines past what a float holds) are a measured fault of the server, never an
exception: the gate fails or stays undecided naming the figure, the deploy rolls back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from examples import EXAMPLE, PLAYBOOK
from fleets import Fleet, checked
from scripted import ScriptedContainer, serving

from orchestrator.cancel import Cancel
from orchestrator.documents.watch import Watch
from orchestrator.fleet.watch import watch_fleet
from orchestrator.gate import GateReport, run_gate
from orchestrator.inventory import load_inventory
from orchestrator.lab.models import published_drafter_config, write_dflash_dir, write_target_dir
from orchestrator.metrics.figures import MAX_COUNT, shown
from orchestrator.metrics.requests import FiguresMalformed, request_measurement
from orchestrator.metrics.scrape import MetricsFormatError, parse_running, parse_spec_decode
from orchestrator.metrics.speed import StreamMalformed, streamed_request
from orchestrator.plan import plan_deploy
from orchestrator.playbook import load_playbook
from orchestrator.probes.context import ContextBucket
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.guard import guard
from orchestrator.transaction.options import Options
from orchestrator.transaction.outcome import Outcome
from orchestrator.transaction.target import TargetRun

HUGE = 10**400
BUCKETS = [ContextBucket("short", 0, None, ("hello",))]
FAST = ["gate.min_drafts=50", "gate.probe.scrape_interval=0.02", "gate.probe.concurrency=1"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    write_target_dir(root / "target", "Qwen3.6-27B")
    write_dflash_dir(root / "drafter", published_drafter_config("z-lab/Qwen3.6-27B-DFlash"))
    return {"target": root / "target", "drafter": root / "drafter"}


def huge_figures(_: bytes) -> tuple[int, bytes]:
    """A completion whose own figures claim 10**400 drafts, each accepting 3 tokens."""
    figures = {
        "acceptance_histogram": [0, 0, 0, HUGE],
        "num_spec_steps": HUGE,
        "num_accepted_draft_tokens": 3 * HUGE,
        "num_draft_tokens": 3 * HUGE,
    }
    return 200, json.dumps({"choices": [], "metrics": {"speculative_decoding": figures}}).encode()


def test_a_deploy_whose_server_answers_huge_figures_fails_its_gate_and_rolls_back(
    models: dict[str, Path],
) -> None:
    playbook = load_playbook(PLAYBOOK, FAST)
    plan = plan_deploy(playbook, load_inventory(EXAMPLE))[0]
    container = ScriptedContainer(plan.container, plan.layout)
    container.models[plan.target_dir] = models["target"]
    if plan.drafter_weights:
        container.models[plan.drafter_weights] = models["drafter"]
    serving(container.transport, playbook.target.served_name)
    container.transport.on_http("POST", "/v1/completions", huge_figures)
    container.transport.on_http("POST", "/v1/chat/completions", huge_figures)
    deployment = Deployment(
        plan,
        container.transport,
        playbook,
        BUCKETS,
        "nvidia-smi",
        Options(run_id="run-now", user="ops"),
        cancel=Cancel(),
        run_gate=run_gate,
    )

    outcome = TargetRun(deployment).deploy()

    assert (outcome.result, outcome.exit_code) == ("failed", 1), outcome.error
    assert "acceptance_histogram" in (outcome.error or "")
    assert container.server is None  # nothing was kept: a first deploy rolls back to nothing
    assert container.layout.journal not in container.files


def two_engines(drafts: int) -> bytes:
    """/metrics of a server of two engines, each counting `drafts` drafts of one token, all
    accepted."""
    lines = []
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        lines += [f'vllm:spec_decode_{name}_total{{engine="{e}"}} {drafts}' for e in (0, 1)]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{e}",position="0"}} {drafts}'
        for e in (0, 1)
    ]
    return ("\n".join(lines) + "\n").encode()


def test_the_watch_of_counters_summed_past_a_float_names_the_figure() -> None:
    fleet = Fleet("gate.min_drafts=50")
    for name, container in fleet.containers.items():
        fleet.deployed(name)  # a release current, its server running
        scrapes = iter([0, *[10**308] * 10])  # each engine's count a float still holds
        container.transport.on_http(
            "GET", "/metrics", lambda _, s=scrapes: (200, two_engines(next(s)))
        )
    documents: list[Watch] = []
    rounds = iter(range(1, 10))

    code = watch_fleet(
        fleet.inputs,
        5.0,
        600.0,
        False,
        documents.append,
        lambda _: next(rounds) >= 2,
        fleet.connect,
    )

    assert code == 3
    for target in checked(documents[-1], "Watch")["targets"]:
        assert target["acceptance"] == "unreachable", target
        assert "vllm:spec_decode_num_drafts_total" in target["reason"]
        assert "(309 digits) is not a count" in target["reason"]


@pytest.mark.parametrize(
    ("body", "figure"),
    [
        ("vllm:spec_decode_num_drafts_total 1" + "0" * 400, "vllm:spec_decode_num_drafts_total"),
        ("vllm:spec_decode_num_drafts_total 1e400", "vllm:spec_decode_num_drafts_total"),
        (f"vllm:spec_decode_num_drafts_total {2**53 + 1}", "vllm:spec_decode_num_drafts_total"),
        ("vllm:spec_decode_num_drafts_created NaN", "vllm:spec_decode_num_drafts_created"),
    ],
)
def test_a_scrape_beyond_the_bounds_of_a_count_names_the_figure(body: str, figure: str) -> None:
    text = body + "\nvllm:spec_decode_num_draft_tokens_total 0\n"
    with pytest.raises(MetricsFormatError, match=figure):
        parse_spec_decode(text)


def test_a_running_gauge_summed_past_the_bounds_is_a_format_error() -> None:
    engines = "".join(f'vllm:num_requests_running{{engine="{e}"}} {MAX_COUNT}\n' for e in (0, 1))
    with pytest.raises(MetricsFormatError, match="summed over the engines"):
        parse_running(engines)


@pytest.mark.parametrize("huge", [10**400, MAX_COUNT + 1, -1, 2.5, True])
def test_per_request_figures_beyond_a_count_are_malformed(huge: object) -> None:
    figures = {
        "acceptance_histogram": [0, huge],
        "num_spec_steps": 1,
        "num_accepted_draft_tokens": 1,
        "num_draft_tokens": 3,
    }
    with pytest.raises(FiguresMalformed, match="acceptance_histogram"):
        request_measurement({"metrics": {"speculative_decoding": figures}})


@pytest.mark.parametrize("tokens", [10**400, -1, "7", None])
def test_a_usage_count_beyond_the_bounds_is_a_malformed_stream(tokens: object) -> None:
    events = [
        (0.1, json.dumps({"choices": [{"text": " a"}]})),
        (0.2, json.dumps({"choices": [], "usage": {"completion_tokens": tokens}})),
    ]
    with pytest.raises(StreamMalformed, match=r"usage\.completion_tokens"):
        streamed_request(events)


def test_a_huge_integer_is_shown_by_its_leading_digits() -> None:
    assert shown(10**400) == "100000... (401 digits)"
    assert shown(-(10**30)) == "-100000... (31 digits)"
    assert shown(42) == "42"


def raising_gate(*_: object) -> GateReport:
    raise OverflowError("int too large to convert to float")


def test_a_gate_that_raises_is_a_failed_gate_and_the_deploy_rolls_back(
    models: dict[str, Path],
) -> None:
    playbook = load_playbook(PLAYBOOK, FAST)
    plan = plan_deploy(playbook, load_inventory(EXAMPLE))[0]
    container = ScriptedContainer(plan.container, plan.layout)
    container.models[plan.target_dir] = models["target"]
    if plan.drafter_weights:
        container.models[plan.drafter_weights] = models["drafter"]
    container.transport.on_http("GET", "/health", lambda _: (200, b""))
    deployment = Deployment(
        plan,
        container.transport,
        playbook,
        BUCKETS,
        "nvidia-smi",
        Options(run_id="run-now", user="ops"),
        cancel=Cancel(),
        run_gate=raising_gate,
    )

    outcome = TargetRun(deployment).deploy()

    assert (outcome.result, outcome.exit_code) == ("failed", 1), outcome.error
    assert "the gate could not judge the server: OverflowError" in (outcome.error or "")
    assert container.server is None
    assert container.layout.journal not in container.files


def test_an_unforeseen_exception_ends_the_run_as_an_outcome() -> None:
    out = Outcome("ct200", "pve1")

    def body() -> None:
        raise OverflowError("int too large to convert to float")

    guard(out, body)

    assert (out.result, out.exit_code) == ("failed", 3)
    assert "unexpected OverflowError: int too large" in (out.error or "")
