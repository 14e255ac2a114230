"""The lab's stand-ins as real processes: vllm on loopback, pct, nvidia-smi.

Every process a test starts is stopped by its PID in a fixture's teardown.
"""

from __future__ import annotations

import copy
import http.client
import itertools
import json
import math
import operator
import os
import random
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from standins import (
    DRAFTER_NAME,
    GREEDY,
    REFERENCE,
    RENDERED,
    TRUTH,
    Acceptance,
    Server,
    add_drafter_weights,
    build_container,
    complete,
    deploy_drafter,
    free_port,
    is_ready,
    measure,
    request,
    samples,
    start_vllm,
    stop_by_pid,
    target_dir,
    wait_ready,
    wait_until,
)

from orchestrator.lab.acceptance import (
    acceptance_profile,
    collapsed_past_window,
    expected_acceptance_length,
    request_multiplier,
    sample_accepted,
    sampling_factor,
)
from orchestrator.lab.paths import (
    VLLM_VERSION_ENV as VERSION_ENV,
)
from orchestrator.lab.paths import (
    ContainerPaths,
    HostPaths,
    write_json_atomic,
)
from orchestrator.lab.vllm_standin import Drafting
from orchestrator.metrics.speed import streamed_request

QWEN3_8B_DRAFTER = json.loads((REFERENCE / "z-lab_Qwen3-8B-DFlash-b16.config.json").read_text())
SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
)
SPEC_DECODE_LINE = re.compile(
    r"^INFO \d\d-\d\d \d\d:\d\d:\d\d \[metrics\.py:\d+\] SpecDecoding metrics: "
    r"Mean acceptance length: \d+\.\d\d, Accepted throughput: \d+\.\d\d tokens/s, "
    r"Drafted throughput: \d+\.\d\d tokens/s, Accepted: \d+ tokens, Drafted: \d+ tokens, "
    r"Per-position acceptance rate: (\d\.\d{3}, ){14}\d\.\d{3}, "
    r"Avg Draft acceptance rate: \d+\.\d%$",
    re.MULTILINE,
)


def with_changes(config: dict, **dflash_or_top: object) -> dict:
    """A copy of a drafter config with fields replaced (dflash_config ones by their name)."""
    changed = copy.deepcopy(config)
    for key, value in dflash_or_top.items():
        if key in changed["dflash_config"]:
            changed["dflash_config"][key] = value
        else:
            changed[key] = value
    return changed


# The wrong guesses seen in the field, each as the deployed config.
WRONG_IDS = with_changes(RENDERED, target_layer_ids=[1, 17, 33, 49, 63])
WRONG_MASK = with_changes(RENDERED, mask_token_id=248064)
ALL_FULL = with_changes(RENDERED, layer_types=["full_attention"] * 5)
WRONG_WINDOW = with_changes(RENDERED, sliding_window=4096)
WRONG_BOS = with_changes(RENDERED, bos_token_id=248044)
FOUR_IDS = with_changes(RENDERED, target_layer_ids=[1, 16, 31, 46])
FC_IN_FEATURES = 5 * 5120


# --- the acceptance model (pure) -------------------------------------------------------------


PUBLISHED = acceptance_profile(RENDERED, TRUTH, FC_IN_FEATURES)
UNVOUCHED = acceptance_profile(RENDERED, None, FC_IN_FEATURES)
"""No published config to vouch for the drafter: a gate must not pass on an unknown."""


def mean_length(profile: list[float]) -> float:
    return expected_acceptance_length(profile, 15)


@pytest.mark.parametrize(
    ("deployed", "truth", "fc_in_features"),
    [
        (WRONG_IDS, TRUTH, FC_IN_FEATURES),
        (WRONG_MASK, TRUTH, FC_IN_FEATURES),
        (FOUR_IDS, TRUTH, FC_IN_FEATURES),
        (FOUR_IDS, FOUR_IDS, FC_IN_FEATURES),  # config as published, weights have 5 layers
        (with_changes(RENDERED, is_neox_style=12345), TRUTH, None),
        (with_changes(RENDERED, rope_theta=12345), TRUTH, None),
        (with_changes(RENDERED, eagle_aux_hidden_state_layer_ids=12345), TRUTH, None),
    ],
    ids=["layer-ids", "mask-token", "four-of-five-ids", "ids-vs-weights", "neox", "rope", "aux"],
)
def test_a_drafter_reading_the_wrong_states_accepts_as_an_unvouched_one(
    deployed: dict, truth: dict | None, fc_in_features: int | None
) -> None:
    """A key vLLM reads for the model or its layers, or a layer count the weights
    contradict: the drafter is served as one nobody vouches for, far below as published."""
    assert acceptance_profile(deployed, truth, fc_in_features) == UNVOUCHED
    assert mean_length(UNVOUCHED) < mean_length(PUBLISHED) / 2


WINDOW_UNSEEN = TRUTH  # deployed as published: vLLM keeps no window for the sliding layers


@pytest.mark.parametrize(
    "deployed",
    [ALL_FULL, WRONG_WINDOW, WINDOW_UNSEEN, with_changes(RENDERED, is_causal=True)],
    ids=["layer-types", "sliding-window", "window-the-server-does-not-see", "causality"],
)
def test_attention_mistakes_accept_less_than_published_more_than_unaligned(
    deployed: dict,
) -> None:
    """Each attention mistake costs the same: the drafter's states still align."""
    wrong = acceptance_profile(deployed, TRUTH, None)
    assert wrong == acceptance_profile(ALL_FULL, TRUTH, None)
    assert mean_length(UNVOUCHED) < mean_length(wrong) < mean_length(PUBLISHED)
    assert all(w < p for w, p in zip(wrong, PUBLISHED, strict=True))


@pytest.mark.parametrize(
    "key", ["bos_token_id", "block_size", "num_target_layers", "dflash_config.block_size"]
)
def test_keys_no_server_reads_change_nothing(key: str) -> None:
    """Keys vLLM's qwen3_dflash.py never reads (the lab's own list, dflash_reading.py)."""
    deployed = copy.deepcopy(RENDERED)
    *parents, leaf = key.split(".")
    node = deployed
    for parent in parents:
        node = node.setdefault(parent, {})
    node[leaf] = 12345
    trained = acceptance_profile(RENDERED, TRUTH, None)
    assert acceptance_profile(deployed, TRUTH, None) == trained


def test_absent_layer_types_mean_full_attention() -> None:
    explicit = with_changes(QWEN3_8B_DRAFTER, layer_types=["full_attention"] * 5)
    implicit = {k: v for k, v in QWEN3_8B_DRAFTER.items() if k != "layer_types"}
    trained = acceptance_profile(QWEN3_8B_DRAFTER, QWEN3_8B_DRAFTER, None)
    assert acceptance_profile(explicit, implicit, None) == trained
    assert acceptance_profile(implicit, explicit, None) == trained


def test_sampled_drafts_follow_the_profile_with_per_request_spread() -> None:
    rng = random.Random(7)
    profile = acceptance_profile(RENDERED, TRUTH, None)
    multipliers = [request_multiplier(rng) for _ in range(200)]
    assert len(set(multipliers)) == 200
    assert all(0.9 <= m <= 1.1 for m in multipliers)
    drafts = [sample_accepted(profile, 15, 1.0, rng) for _ in range(20_000)]
    assert 1 + sum(drafts) / len(drafts) == pytest.approx(
        expected_acceptance_length(profile, 15), rel=0.05
    )
    assert sum(d >= 1 for d in drafts) / len(drafts) == pytest.approx(profile[0], abs=0.015)
    assert max(drafts) <= 15


def test_full_attention_past_the_window_collapses_after_position_four() -> None:
    profile = acceptance_profile(RENDERED, TRUTH, None)
    drafting = Drafting(15, profile, sliding_window=2048, swa_as_full_attention=True)
    assert drafting.profile_at(2048) == profile
    collapsed = drafting.profile_at(2049)
    reach = list(itertools.accumulate(collapsed, operator.mul))
    assert reach[:4] == pytest.approx([0.55, 0.25, 0.08, 0.02])
    assert not any(collapsed[4:])
    assert 1.8 <= expected_acceptance_length(collapsed, 15) <= 2.0


def test_collapse_never_improves_a_drafter_that_already_misses() -> None:
    unaligned = acceptance_profile(WRONG_IDS, TRUTH, None)
    assert collapsed_past_window(unaligned) == unaligned


@pytest.mark.parametrize(
    "drafting",
    [
        Drafting(15, [0.8] * 15, sliding_window=2048),
        Drafting(15, [0.8] * 15, sliding_window=None, swa_as_full_attention=True),
    ],
    ids=["window-honoured", "no-window"],
)
def test_long_context_is_normal_when_the_window_is_honoured_or_absent(drafting: Drafting) -> None:
    assert drafting.profile_at(100_000) == [0.8] * 15


# --- vllm: start-up, routes, metrics ---------------------------------------------------------


def test_refuses_connections_while_loading_then_serves(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    server = start_vllm(started, container, drafter=drafter, load_seconds=1.5)
    wait_until(server.record.exists)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    wait_ready(server)
    status, body, _ = request(server.port, "GET", "/health")
    assert (status, body) == (200, b"")
    assert f"Starting vLLM server on http://127.0.0.1:{server.port}" in server.output()
    assert "Loading weights took" in server.output()


def test_serves_openai_routes_and_vllm_metrics(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    server = wait_ready(
        start_vllm(started, container, "--served-model-name", "qwen3.6-27b", drafter=drafter)
    )
    status, body, _ = request(server.port, "GET", "/v1/models")
    assert status == 200
    assert [model["id"] for model in json.loads(body)["data"]] == ["qwen3.6-27b"]

    completion = complete(server.port, 40)
    assert completion["object"] == "text_completion"
    assert completion["usage"]["completion_tokens"] == 40
    assert len(completion["choices"][0]["text"].split()) == 40
    status, body, _ = request(
        server.port,
        "POST",
        "/v1/chat/completions",
        {"model": "qwen3.6-27b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
    )
    assert status == 200
    assert json.loads(body)["choices"][0]["message"]["role"] == "assistant"
    status, body, _ = request(
        server.port, "POST", "/v1/completions", {"model": "other", "prompt": "x"}
    )
    assert status == 404  # the default release's words (0.34.0 serve/engine/serving.py:78-79)
    assert json.loads(body)["error"] == {
        "message": "The model `other` does not exist. Valid aliases: qwen3.6-27b.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }

    status, body, content_type = request(server.port, "GET", "/metrics")
    assert content_type.startswith("text/plain")
    families = list(text_string_to_metric_families(body.decode()))
    by_name = {s.name: s for f in families for s in f.samples}
    for name in SPEC_COUNTERS:
        assert by_name[name].labels["model_name"] == "qwen3.6-27b"
        assert by_name[name].labels["engine"] == "0"
    positions = {
        s.labels["position"]
        for f in families
        for s in f.samples
        if s.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    }
    assert positions == {str(i) for i in range(15)}
    assert by_name["vllm:generation_tokens_total"].value == 48
    assert "vllm:num_requests_running" in by_name


def stream(port: int, path: str, body: dict) -> list[tuple[float, str]]:
    """A streamed request's `data:` payloads, each with the seconds after sending it arrived."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        sent = time.monotonic()
        connection.request(
            "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        assert response.status == 200, response.read()
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        events = []
        while line := response.readline():
            if line.startswith(b"data:"):
                events.append((time.monotonic() - sent, line[5:].strip().decode()))
        return events
    finally:
        connection.close()


STREAM_REQUEST = {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": 24}


def test_streams_each_engine_step_as_vllm_and_the_gate_reads_it(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    """Chunks as vLLM 0.32.0 dumps them (completion/serving.py:404-503): one per engine
    step, timed by the step; the usage chunk; [DONE]. The gate's parser reads them."""
    server = wait_ready(
        start_vllm(started, container, "--tokens-per-second", "40", drafter=drafter)
    )
    events = stream(server.port, "/v1/completions", {"prompt": "hi", **STREAM_REQUEST, **GREEDY})
    assert events[-1][1] == "[DONE]"
    chunks = [json.loads(data) for _, data in events[:-1]]
    *steps, usage = chunks
    assert list(steps[0]) == ["id", "object", "created", "model", "choices"]
    assert list(steps[0]["choices"][0]) == [
        "index",
        "text",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "prompt_token_ids",
        "token_ids",
    ]
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert len({c["id"] for c in chunks}) == 1
    assert [c["choices"][0]["finish_reason"] for c in steps] == [None] * (len(steps) - 1) + [
        "length"
    ]
    assert len("".join(c["choices"][0]["text"] for c in steps).split()) == 24
    assert 1 < len(steps) < 24  # drafts accepted: several tokens a step, and many steps
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 1, "total_tokens": 25, "completion_tokens": 24}
    arrivals = [arrived for arrived, _ in events[:-2]]
    assert arrivals == sorted(arrivals)
    assert arrivals[-1] - arrivals[0] >= (len(steps) - 1) / 40 * 0.9  # a step each 1/40 s or more
    measured = streamed_request(events)
    assert measured.tokens == 24
    assert (measured.first_token, measured.last_token) == (arrivals[0], arrivals[-1])
    assert measured.decode_speed is not None and measured.decode_speed > 0

    chat = stream(
        server.port,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], **STREAM_REQUEST},
    )
    role, *chat_steps, chat_usage = [json.loads(data) for _, data in chat[:-1]]
    assert role["object"] == "chat.completion.chunk"
    assert role["choices"] == [
        {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
    ]
    assert (role["prompt_token_ids"], role["prompt_text"]) == (None, None)
    assert list(chat_steps[-1]["choices"][0]) == [
        "index",
        "delta",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "token_ids",
    ]
    assert len("".join(c["choices"][0]["delta"]["content"] for c in chat_steps).split()) == 24
    assert chat_usage["usage"]["completion_tokens"] == 24


def test_a_stream_without_include_usage_ends_on_its_last_step(
    container: ContainerPaths, started: list
) -> None:
    """No usage chunk unless asked: the last event before [DONE] finishes the choice and
    carries the fingerprint (the release the stand-in claims by default has one)."""
    server = wait_ready(start_vllm(started, container))
    events = stream(
        server.port, "/v1/completions", {"prompt": "hi", "stream": True, "max_tokens": 3}
    )
    assert [data for _, data in events][-1] == "[DONE]"
    steps = [json.loads(data) for _, data in events[:-1]]
    assert [c["choices"][0]["text"] for c in steps] == ["the", " draft", " tokens"]  # no drafter
    assert steps[-1]["choices"][0]["finish_reason"] == "length"
    assert "usage" not in steps[-1]
    assert steps[-1]["system_fingerprint"].startswith("vllm-")
    assert ["system_fingerprint" in c for c in steps[:-1]] == [False, False]


def test_without_speculative_config_there_are_no_spec_decode_series(
    container: ContainerPaths, started: list
) -> None:
    server = wait_ready(start_vllm(started, container))
    complete(server.port, 64)
    names = {name for name, _ in samples(server.port)}
    assert "vllm:generation_tokens_total" in names
    assert not [name for name in names if name.startswith("vllm:spec_decode")]


def test_logs_vllms_spec_decoding_line_while_there_is_traffic(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    server = start_vllm(started, container, drafter=drafter, env={"VLLM_LOG_STATS_INTERVAL": "0.2"})
    wait_ready(server)
    complete(server.port, 400)
    wait_until(lambda: SPEC_DECODE_LINE.search(server.output()))


# --- vllm: acceptance by deployed config (statistical, from the counters) ---------------------

CASES = {
    "published": (RENDERED, DRAFTER_NAME),
    "layer-ids": (WRONG_IDS, DRAFTER_NAME),
    "mask-token": (WRONG_MASK, DRAFTER_NAME),
    "ids-vs-weights": (FOUR_IDS, "Qwen3.6-27B-DFlash-4ids"),
    "layer-types": (ALL_FULL, DRAFTER_NAME),
    "sliding-window": (WRONG_WINDOW, DRAFTER_NAME),
    "bos-token": (WRONG_BOS, DRAFTER_NAME),
}


@pytest.fixture(scope="module")
def acceptance_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    """One server per deployed config, started together (each holds 10% of one GPU)."""
    container = build_container(tmp_path_factory.mktemp("acceptance"))
    # A drafter published with 4 layer ids whose weights were trained with 5.
    add_drafter_weights(container, "Qwen3.6-27B-DFlash-4ids", FOUR_IDS)
    started: list[subprocess.Popen] = []
    try:
        servers = {
            case: start_vllm(
                started,
                container,
                "--gpu-memory-utilization",
                "0.1",
                drafter=deploy_drafter(container, case, config, name),
            )
            for case, (config, name) in CASES.items()
        }
        for server in servers.values():
            wait_ready(server)
        yield servers
    finally:
        for process in started:
            stop_by_pid(process)


@pytest.fixture(scope="module")
def published_acceptance(acceptance_servers: dict[str, Server]) -> Acceptance:
    return measure(acceptance_servers["published"].port, requests=120)


def test_published_config_accepts_well(published_acceptance: Acceptance) -> None:
    assert published_acceptance.drafts > 5000
    assert 3.5 <= published_acceptance.mean_length <= 5
    assert published_acceptance.per_position[0] == pytest.approx(0.8, abs=0.05)


@pytest.mark.parametrize("case", ["layer-ids", "mask-token", "ids-vs-weights"])
def test_misaligned_drafter_is_almost_never_accepted(
    acceptance_servers: dict[str, Server], case: str
) -> None:
    measured = measure(acceptance_servers[case].port, requests=16)
    assert measured.drafts > 3000
    assert measured.mean_length == pytest.approx(1.1, abs=0.06)
    assert measured.per_position[0] == pytest.approx(0.08, abs=0.025)
    assert measured.per_position[1] == pytest.approx(0.03, abs=0.015)
    assert not any(measured.per_position[2:])


@pytest.mark.parametrize(
    ("case", "low", "high"),
    [("layer-types", 0.4, 0.62), ("sliding-window", 0.4, 0.62), ("bos-token", 0.92, 1.08)],
)
def test_attention_mistakes_lower_acceptance_and_bos_changes_nothing(
    acceptance_servers: dict[str, Server],
    published_acceptance: Acceptance,
    case: str,
    low: float,
    high: float,
) -> None:
    measured = measure(acceptance_servers[case].port, requests=120)
    assert low <= measured.mean_length / published_acceptance.mean_length <= high


# --- vllm: failures at start-up ----------------------------------------------------------------


def broken_start(
    container: ContainerPaths, started: list, drafter: Path | None, *flags: str
) -> Server:
    server = start_vllm(started, container, *flags, drafter=drafter)
    server.process.wait(timeout=10)
    return server


@pytest.mark.parametrize(
    "drafter_config",
    [None, "{not json", json.dumps({**RENDERED, "dflash_config": {"mask_token_id": 248070}})],
    ids=["missing", "not-json", "no-target-layer-ids"],
)
def test_bad_drafter_config_fails_at_start_with_a_traceback(
    container: ContainerPaths, started: list, drafter_config: str | None
) -> None:
    drafter = deploy_drafter(container, "bad", None, DRAFTER_NAME)
    if drafter_config is not None:
        (drafter / "config.json").write_text(drafter_config)
    server = broken_start(container, started, drafter)
    assert server.process.returncode != 0
    assert "Traceback (most recent call last)" in server.output()
    assert not list(container.servers_dir.glob("*.json"))


def test_speculative_config_needs_num_speculative_tokens(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    flags = ["--speculative-config", json.dumps({"method": "dflash", "model": str(drafter)})]
    server = broken_start(container, started, None, *flags)
    assert server.process.returncode == 1
    output = server.output()
    assert "Traceback" in output
    assert (
        "1 validation error for SpeculativeConfig\nnum_speculative_tokens\n  Field required"
        in output
    )


def test_missing_target_config_fails_with_a_traceback(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    (target_dir(container) / "config.json").unlink()
    server = broken_start(container, started, drafter)
    assert server.process.returncode == 1
    assert "Traceback" in server.output()
    assert "config.json" in server.output()


def test_unknown_flag_is_a_usage_error(container: ContainerPaths, started: list) -> None:
    """As the real 0.32.0 `vllm serve M --bogus-flag 1`: exit 2 and argparse's line."""
    server = broken_start(container, started, None, "--bogus-flag", "1")
    assert server.process.returncode == 2
    assert server.output().splitlines()[-1] == "vllm: error: unrecognized arguments: --bogus-flag 1"


def bad_launch(container: ContainerPaths, started: list, speculative: str) -> tuple[int, str]:
    """Exit code and the error's lines from the first one naming an error, as the real
    0.32.0 server printed them for the same --speculative-config."""
    env = {VERSION_ENV: "0.32.0"}
    server = start_vllm(started, container, "--speculative-config", speculative, env=env)
    code = server.process.wait(timeout=10)
    lines = server.output().splitlines()
    first = next(
        i for i, line in enumerate(lines) if re.match(r"(\S+Error|vllm serve: error)", line)
    )
    return code, "\n".join(lines[first:])


def test_invalid_json_is_a_usage_error_as_vllm_words_it(
    container: ContainerPaths, started: list
) -> None:
    code, error = bad_launch(container, started, "{bad")
    assert code == 2
    assert re.fullmatch(
        r"vllm serve: error: argument --speculative-config/-sc: Value \{bad cannot be "
        r"converted to <function loads at 0x[0-9a-f]+>\.",
        error,
    ), error


def test_an_unknown_speculative_key_is_pydantics_unexpected_keyword_argument(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    config = {"method": "dflash", "model": str(drafter), "num_speculative_tokens": 3}
    code, error = bad_launch(container, started, json.dumps({**config, "bogus_key": 1}))
    assert code == 1
    assert error.splitlines()[:3] == [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
        "bogus_key",
        "  Unexpected keyword argument [type=unexpected_keyword_argument, input_value=1, "
        "input_type=int]",
    ]


def test_an_unknown_method_lists_the_releases_methods(
    container: ContainerPaths, started: list
) -> None:
    code, error = bad_launch(container, started, '{"method":"nope","num_speculative_tokens":3}')
    assert code == 1
    assert error.splitlines()[1] == "method"
    assert error.splitlines()[2].startswith(
        "  Input should be 'ngram', 'medusa', 'mlp_speculator', 'draft_model', 'suffix', "
        "'custom_class', 'eagle', 'eagle3', 'extract_hidden_states', 'deepseek_mtp', "
    )
    assert error.splitlines()[2].endswith(
        "'glm5_next_mtp', 'dflash', 'ngram_gpu' or 'dspark' "
        "[type=literal_error, input_value='nope', input_type=str]"
    )


def test_a_drafter_dir_without_config_is_pydantics_value_error(
    container: ContainerPaths, started: list
) -> None:
    missing = container.rootfs / "models/missing"
    config = {"method": "dflash", "model": str(missing), "num_speculative_tokens": 3}
    code, error = bad_launch(container, started, json.dumps(config))
    assert code == 1
    assert error.splitlines()[:2] == [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
        f"  Value error, Invalid repository ID or local directory specified: '{missing}'.",
    ]


def test_decode_speed_must_be_positive(container: ContainerPaths, started: list) -> None:
    server = broken_start(container, started, None, "--tokens-per-second", "0")
    assert server.process.returncode == 2
    assert "--tokens-per-second: must be > 0, got 0" in server.output()


def test_busy_gpu_refuses_a_second_server(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    wait_ready(start_vllm(started, container, drafter=drafter))
    second = broken_start(container, started, drafter)
    assert second.process.returncode == 1
    assert "is less than desired GPU memory utilization" in second.output()


# --- vllm: stopping and faults -----------------------------------------------------------------


def stop_seconds(server: Server) -> float:
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=10)
    return time.monotonic() - started


def test_sigterm_stops_within_two_seconds_and_drops_the_record(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    server = wait_ready(start_vllm(started, container, drafter=drafter))
    assert server.record.exists()
    assert stop_seconds(server) < 2
    assert server.process.returncode == 0
    assert not server.record.exists()


def test_hang_while_loading_from_faults_file(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    write_json_atomic(container.faults, {"hang_while_loading": True})
    server = start_vllm(started, container, drafter=drafter, load_seconds=0.1)
    wait_until(server.record.exists)
    time.sleep(0.6)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    assert stop_seconds(server) < 2
    assert not server.record.exists()


def test_crash_after_ready(container: ContainerPaths, drafter: Path, started: list) -> None:
    """As the real 0.32.0 server did when its engine died: the error and traceback in the
    log, /health 503 and requests 500 until the watchdog stops it, then exit 0."""
    server = start_vllm(
        started, container, drafter=drafter, faults={"crash_after_ready_seconds": 0.5}
    )
    wait_ready(server)
    wait_until(lambda: request(server.port, "GET", "/health")[0] == 503)
    status, body, _ = request(server.port, "POST", "/v1/completions", {"prompt": "x"})
    assert status == 500 and b"EngineCore encountered an issue" in body
    server.process.wait(timeout=10)
    assert server.process.returncode == 0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    assert "EngineCore encountered a fatal error" in server.output()
    assert "Traceback" in server.output()
    assert "EngineDeadError" in server.output()


def test_ignore_sigterm(container: ContainerPaths, drafter: Path, started: list) -> None:
    server = wait_ready(
        start_vllm(started, container, drafter=drafter, faults={"ignore_sigterm": True})
    )
    server.process.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        server.process.wait(timeout=1)
    assert is_ready(server)


def test_garbage_metrics(container: ContainerPaths, drafter: Path, started: list) -> None:
    server = wait_ready(
        start_vllm(started, container, drafter=drafter, faults={"garbage_metrics": True})
    )
    with pytest.raises(ValueError):
        samples(server.port)


def test_drop_spec_decode(container: ContainerPaths, drafter: Path, started: list) -> None:
    server = wait_ready(
        start_vllm(started, container, drafter=drafter, faults={"drop_spec_decode": True})
    )
    complete(server.port, 64)
    names = {name for name, _ in samples(server.port)}
    assert "vllm:generation_tokens_total" in names
    assert not [name for name in names if name.startswith("vllm:spec_decode")]


# --- pct ---------------------------------------------------------------------------------------


def pct_path(container: ContainerPaths) -> Path:
    return HostPaths(container.root.parent.parent).pct


def pct(container: ContainerPaths, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(pct_path(container)), *args], input=stdin, capture_output=True, timeout=30
    )


def test_pct_exec_runs_argv_without_a_shell(container: ContainerPaths) -> None:
    result = pct(container, "exec", "100", "--", "echo", "$HOME;x")
    assert (result.returncode, result.stdout) == (0, b"$HOME;x\n")


def test_pct_exec_passes_exit_status_and_stdin(container: ContainerPaths) -> None:
    assert pct(container, "exec", "100", "--", "sh", "-c", "exit 7").returncode == 7
    result = pct(container, "exec", "100", "--", "/bin/cat", stdin=b"line one\nline two\n")
    assert (result.returncode, result.stdout) == (0, b"line one\nline two\n")


def test_pct_exec_environment(container: ContainerPaths) -> None:
    result = pct(container, "exec", "100", "--", "sh", "-c", 'pwd; echo "$HOME"; echo "$PATH"')
    cwd, home, path = result.stdout.decode().splitlines()
    assert (Path(cwd), home) == (container.rootfs, "/root")
    assert path.split(":")[-4:] == ["/sbin", "/bin", "/usr/sbin", "/usr/bin"]
    found = pct(container, "exec", "100", "--", "nvidia-smi", "--query-gpu=count", "--format=csv")
    assert found.stdout == b"count\n2\n2\n"


def test_pct_exec_refusals(container: ContainerPaths) -> None:
    no_dashes = pct(container, "exec", "100", "echo", "hi")
    assert no_dashes.returncode == 255
    assert no_dashes.stderr.startswith(b"400 unable to parse option\npct exec <vmid>")
    assert pct(container, "exec", "100", "--").returncode == 255
    missing = pct(container, "exec", "100", "--", "no-such-command")
    assert missing.returncode == 127
    assert b'Failed to exec "no-such-command"' in missing.stderr
    (container.rootfs / "not-executable").write_text("echo hi\n")
    refused = pct(container, "exec", "100", "--", str(container.rootfs / "not-executable"))
    assert refused.returncode == 126
    assert b"Permission denied - Failed to exec" in refused.stderr
    unknown = pct(container, "exec", "999", "--", "true")
    assert unknown.returncode == 2  # pct dies with errno ENOENT set: docs/field-notes/proxmox.md
    assert unknown.stderr == b"Configuration file 'nodes/pve1/lxc/999.conf' does not exist\n"
    assert pct(container, "frobnicate", "100").returncode == 255


def test_pct_status_list_config_start_stop(container: ContainerPaths) -> None:
    assert pct(container, "status", "100").stdout == b"status: running\n"
    listing = pct(container, "list").stdout.decode().splitlines()
    assert listing[0].rstrip() == "VMID       Status     Lock         Name"
    assert listing[1].split() == ["100", "running", "gpu1"]
    config = pct(container, "config", "100").stdout
    assert config == container.config.read_bytes()
    assert pct(container, "start", "100").returncode == 255

    assert pct(container, "stop", "100").returncode == 0
    assert pct(container, "status", "100").stdout == b"status: stopped\n"
    refused = pct(container, "exec", "100", "--", "true")
    assert (refused.returncode, refused.stderr) == (255, b"container '100' not running!\n")
    assert pct(container, "start", "100").returncode == 0
    assert pct(container, "exec", "100", "--", "true").returncode == 0


def test_pct_stop_terminates_the_containers_servers(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    serve = [str(container.vllm), "serve", str(target_dir(container)), "--port", str(free_port())]
    process = subprocess.Popen(
        [str(pct_path(container)), "exec", "100", "--", *serve, "--load-seconds", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started.append(process)
    wait_until(container.server_record(process.pid).exists)
    assert pct(container, "stop", "100").returncode == 0
    assert process.wait(timeout=5) == 0
    assert not container.server_record(process.pid).exists()


def test_pct_push_and_pull(container: ContainerPaths, tmp_path: Path) -> None:
    source = tmp_path / "serve.sh"
    source.write_text("#!/bin/sh\n")
    (container.rootfs / "etc").mkdir()
    assert pct(container, "push", "100", str(source), "/etc/serve.sh").returncode == 0
    assert (container.rootfs / "etc/serve.sh").read_text() == "#!/bin/sh\n"
    under_rootfs = str(container.rootfs / "etc/again.sh")
    assert pct(container, "push", "100", str(source), under_rootfs).returncode == 0
    assert Path(under_rootfs).read_text() == "#!/bin/sh\n"

    failed = pct(container, "push", "100", str(source), "/no/such/dir/serve.sh")
    assert failed.returncode == 0  # pct's quirk: the copy failed, the exit status says nothing
    assert b"failed to create file: /no/such/dir/serve.sh" in failed.stderr
    assert not (container.rootfs / "no").exists()

    back = tmp_path / "back.sh"
    assert pct(container, "pull", "100", "/etc/serve.sh", str(back)).returncode == 0
    assert back.read_text() == "#!/bin/sh\n"


# --- nvidia-smi ----------------------------------------------------------------------------------


def nvidia_smi(container: ContainerPaths, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(container.nvidia_smi), *args], capture_output=True, timeout=30)


GPU_QUERY = "--query-gpu=index,name,uuid,memory.total,memory.used,memory.free"
APPS_QUERY = "--query-compute-apps=pid,used_memory,gpu_uuid"


def test_nvidia_smi_reports_memory_of_running_servers(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    idle = nvidia_smi(container, GPU_QUERY, "--format=csv,noheader,nounits").stdout.decode()
    uuid0 = "GPU-00000100-0000-4000-8000-000000000000"
    assert idle.splitlines()[0] == f"0, NVIDIA RTX A6000, {uuid0}, 49140, 0, 49140"
    assert nvidia_smi(container, APPS_QUERY, "--format=csv,noheader,nounits").stdout == b""

    server = wait_ready(start_vllm(started, container, drafter=drafter))
    busy = nvidia_smi(container, GPU_QUERY, "--format=csv,noheader,nounits").stdout.decode()
    assert busy.splitlines()[0] == f"0, NVIDIA RTX A6000, {uuid0}, 49140, 44226, 4914"
    assert busy.splitlines()[1].endswith(", 49140, 0, 49140")
    apps = nvidia_smi(container, APPS_QUERY, "--format=csv,noheader,nounits").stdout.decode()
    assert apps == f"{server.process.pid}, 44226, {uuid0}\n"
    with_units = nvidia_smi(container, GPU_QUERY, "--format=csv").stdout.decode().splitlines()
    assert with_units[0] == (
        "index, name, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB]"
    )
    assert with_units[1].endswith("49140 MiB, 44226 MiB, 4914 MiB")
    assert str(server.process.pid) in nvidia_smi(container).stdout.decode()

    stop_seconds(server)
    after = nvidia_smi(container, GPU_QUERY, "--format=csv,noheader,nounits").stdout
    assert after.decode() == idle


def test_nvidia_smi_ignores_records_of_dead_or_other_processes(container: ContainerPaths) -> None:
    finished = subprocess.Popen(["true"])
    finished.wait()
    for pid in (finished.pid, os.getpid()):
        write_json_atomic(
            container.server_record(pid),
            {"pid": pid, "port": 1, "gpu_memory_mib": {"0": 1000}, "started": 0},
        )
    apps = nvidia_smi(container, APPS_QUERY, "--format=csv,noheader,nounits")
    assert (apps.returncode, apps.stdout) == (0, b"")


def test_nvidia_smi_refuses_unknown_fields(container: ContainerPaths) -> None:
    result = nvidia_smi(container, "--query-gpu=index,bogus", "--format=csv")
    assert result.returncode == 2
    assert result.stdout.startswith(b'Field "bogus" is not a valid field to query.')


@pytest.mark.parametrize(
    ("route", "knob", "seconds"),
    [("/health", "drip_health_seconds", 0.01), ("/metrics", "drip_metrics_seconds", 0.0005)],
)
def test_dripping_routes_answer_one_byte_at_a_time(
    container: ContainerPaths, drafter: Path, started: list, route: str, knob: str, seconds: float
) -> None:
    server = wait_ready(start_vllm(started, container, drafter=drafter, faults={knob: seconds}))
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
        connection.sendall(f"GET {route} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    length = int(
        next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[
            1
        ]
    )
    assert len(body) == length
    assert len(chunks) > 20  # byte by byte; a busy reader may find a few waiting at once


# --- vllm: sampling ------------------------------------------------------------------------


def test_sampling_keeps_greedy_acceptance_and_loses_it_as_temperature_rises() -> None:
    """Greedy keeps everything; hotter keeps less, down to almost nothing on a flat
    distribution (the tiny target's vocabulary is 4,096 tokens)."""
    assert sampling_factor(0.0) == 1.0
    factors = [sampling_factor(t / 10) for t in range(0, 101)]
    assert all(hotter < colder for colder, hotter in itertools.pairwise(factors))
    assert 0.5 < sampling_factor(1.0) < 0.7
    assert sampling_factor(10.0) < 0.01
    assert sampling_factor(20.0) == pytest.approx(sampling_factor(10.0))


def test_requests_without_sampling_get_the_servers_default_temperature(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    """vLLM samples an unset temperature at the target's generation_config.json default,
    else 1.0; the same drafter accepts less there than greedily."""
    half = ("--gpu-memory-utilization", "0.4")  # two servers side by side
    server = wait_ready(start_vllm(started, container, *half, drafter=drafter))
    greedy = measure(server.port, requests=32)
    unset = measure(server.port, requests=32, sampling={})
    assert_first_position_rate(greedy, 0.8)
    assert_first_position_rate(unset, 0.8 * sampling_factor(1.0))

    (target_dir(container) / "generation_config.json").write_text('{"temperature": 0.7}')
    configured = wait_ready(start_vllm(started, container, *half, drafter=drafter))
    unset = measure(configured.port, requests=32, sampling={})
    assert_first_position_rate(unset, 0.8 * sampling_factor(0.7))


def assert_first_position_rate(measured: Acceptance, expected: float) -> None:
    """Within five binomial standard errors of the drafts seen, plus the per-request spread
    (REQUEST_SPREAD over the requests' means): a wrong temperature misses by far more."""
    error = 5 * math.sqrt(expected * (1 - expected) / measured.drafts) + 0.01
    assert measured.per_position[0] == pytest.approx(expected, abs=error)


# --- vllm: what speculation costs (step_cost.py, speed_costs.yaml) -----------------------------

FIELD_TOKENS_PER_SECOND = 200.0
"""Steps of 5 ms: long beside a thread's wake-up, short enough for a test."""


def total_tokens_per_second(port: int, streams: int, rounds: int, max_tokens: int) -> float:
    """Rounds of `streams` completions at once: all their tokens over all their time."""
    tokens, started = 0, time.monotonic()
    with ThreadPoolExecutor(streams) as pool:
        for _ in range(rounds):
            done = pool.map(lambda _: complete(port, max_tokens), range(streams))
            tokens += sum(response["usage"]["completion_tokens"] for response in done)
    return tokens / (time.monotonic() - started)


def test_at_field_speed_dflash_pays_at_one_stream_and_loses_at_thirty_two(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    """The published shape (speed_costs.yaml, field-dflash): a good DFlash drafter
    (the published config, acceptance about 4.3 here) serves one stream faster than
    its target alone and 32 streams slower, because every stream's 16 verified tokens
    share the batch's steps."""
    field = ("--tokens-per-second", str(FIELD_TOKENS_PER_SECOND), "--step-costs", "field-dflash")
    plain = wait_ready(start_vllm(started, container, *field, "--gpu-memory-utilization", "0.1"))
    spec = wait_ready(
        start_vllm(started, container, *field, "--gpu-memory-utilization", "0.1", drafter=drafter)
    )
    one = [total_tokens_per_second(s.port, 1, rounds=4, max_tokens=96) for s in (plain, spec)]
    many = [total_tokens_per_second(s.port, 32, rounds=1, max_tokens=96) for s in (plain, spec)]
    assert one[1] / one[0] > 1.4, one
    assert many[1] / many[0] < 0.8, many


def test_an_unknown_step_cost_profile_is_a_usage_error(
    container: ContainerPaths, started: list
) -> None:
    server = broken_start(container, started, None, "--step-costs", "warp-speed")
    assert "--step-costs: invalid choice: 'warp-speed'" in server.output()
