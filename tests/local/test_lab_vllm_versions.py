"""The lab's vLLM stand-in behaves like the release it claims, as its own source-cited data
(orchestrator/lab/vllm_releases.yaml) says; never as orch's capability table says.

Real started on loopback; every one is stopped by its PID in the `started` fixture.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from standins import (
    DRAFTER_NAME,
    RENDERED,
    build_container,
    complete,
    deploy_drafter,
    measure,
    start_vllm,
    target_dir,
    wait_ready,
)

from orchestrator.lab.paths import VLLM_VERSION_ENV, ContainerPaths
from orchestrator.lab.releases import default_release, known_releases, release
from orchestrator.lab.vllm_standin import load_drafting


def mixed_drafter_error(version: str) -> str | None:
    """The release's words for a mixed drafter it refuses, from the lab's data (read back
    from the wheel at hand by tests/local/test_wheelfacts.py)."""
    return release(version).fact("mixed_dflash_drafter").error


@pytest.fixture
def container(tmp_path: Path) -> ContainerPaths:
    return build_container(tmp_path)


@pytest.fixture
def drafter(container: ContainerPaths) -> Path:
    return deploy_drafter(container, "r1", RENDERED, DRAFTER_NAME)


def version_of(container: ContainerPaths, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(container.vllm), "--version"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


def test_version_flag_prints_the_claimed_version(container: ContainerPaths) -> None:
    assert version_of(container, {VLLM_VERSION_ENV: "0.19.1"}) == "0.19.1"
    unset = {k: v for k, v in os.environ.items() if k != VLLM_VERSION_ENV}
    done = subprocess.run(
        [str(container.vllm), "--version"], capture_output=True, text=True, env=unset, timeout=30
    )
    assert done.stdout.strip() == default_release() == known_releases()[-1] == "0.34.0"


def started_and_died(
    started: list, container: ContainerPaths, drafter: Path, **env: str | None
) -> str:
    server = start_vllm(started, container, drafter=drafter, env=env)
    assert server.process.wait(timeout=20) == 1
    assert not list(container.servers_dir.glob("*.json"))
    return server.output()


def test_v2_runner_versions_refuse_a_mixed_drafter_without_the_runner(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    output = started_and_died(
        started,
        container,
        drafter,
        **{VLLM_VERSION_ENV: "0.27.1", "VLLM_USE_V2_MODEL_RUNNER": "0"},
    )
    assert "Traceback (most recent call last)" in output
    assert output.rstrip().endswith(str(mixed_drafter_error("0.27.1")))


def test_refusing_versions_refuse_a_mixed_drafter_even_on_the_v2_runner(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    output = started_and_died(started, container, drafter, **{VLLM_VERSION_ENV: "0.25.1"})
    assert output.rstrip().endswith(str(mixed_drafter_error("0.25.1")))


def test_versions_without_dflash_refuse_the_method(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    output = started_and_died(started, container, drafter, **{VLLM_VERSION_ENV: "0.19.1"})
    assert "validation error for SpeculativeConfig\nmethod" in output
    assert "input_value='dflash'" in output
    assert "Input should be 'ngram', 'medusa', 'mlp_speculator', 'draft_model'" in output


def test_old_versions_run_sliding_layers_as_full_attention_and_keep_a_zero_head(
    container: ContainerPaths, drafter: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    target = json.loads((target_dir(container) / "config.json").read_text())
    speculative = {"method": "dflash", "model": str(drafter), "num_speculative_tokens": 15}

    old = load_drafting(speculative, container, release("0.24.0"), target)
    assert old.swa_as_full_attention
    assert old.profile[0] < 0.02 and not any(old.profile[1:])

    current = load_drafting(speculative, container, release("0.27.1"), target)
    assert not current.swa_as_full_attention
    assert current.profile[0] == pytest.approx(0.8, abs=0.02)

    causal_target = {**target, "architectures": ["Qwen3_5ForCausalLM"]}
    old_causal = load_drafting(speculative, container, release("0.24.0"), causal_target)
    assert old_causal.profile == current.profile


def test_zero_head_version_accepts_almost_nothing_on_a_conditional_generation_target(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    """0.24's V2 runner leaves a *ForConditionalGeneration target's drafter its zero head;
    start_vllm runs with VLLM_USE_V2_MODEL_RUNNER=1, as the zero head needs."""
    server = wait_ready(
        start_vllm(started, container, drafter=drafter, env={VLLM_VERSION_ENV: "0.24.0"})
    )
    measured = measure(server.port, requests=8)
    assert measured.drafts > 1000
    assert measured.mean_length < 1.05
    assert "vLLM API server version 0.24.0" in server.output()


def get(port: int, path: str, accept: str | None = None) -> tuple[int, str, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers={"Accept": accept} if accept else {})
        response = connection.getresponse()
        body = response.read().decode()
        return response.status, body, response.getheader("Content-Type") or ""
    finally:
        connection.close()


def health_from_start(container: ContainerPaths, started: list, version: str) -> list:
    """What /health answered from the process start until 200: `refused` while loading."""
    flags = ("--gpu-memory-utilization", "0.1", "--load-seconds", "1.0")  # side by side
    server = start_vllm(started, container, *flags, env={VLLM_VERSION_ENV: version})
    seen: list = []
    while not seen or seen[-1] != 200:
        assert server.process.poll() is None, server.output()
        try:
            answer: object = get(server.port, "/health")[0]
        except ConnectionRefusedError:
            answer = "refused"
        if not seen or seen[-1] != answer:
            seen.append(answer)
    return seen


@pytest.mark.parametrize("version", ["0.19.1", "0.27.1", "0.34.0"])
def test_health_is_refused_while_loading_then_200_never_503(
    container: ContainerPaths, started: list, version: str
) -> None:
    """Every release binds the port first and listens once the engine is built; /health
    answers 503 only for a dead engine (vllm_releases.yaml, shared.health)."""
    assert health_from_start(container, started, version) == ["refused", 200]


def test_metrics_in_the_classic_text_format_whatever_the_accept_header(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    """vLLM's /metrics route is prometheus-fastapi-instrumentator's `expose`, which answers
    generate_latest with CONTENT_TYPE_LATEST and reads no Accept header (0.32.0 and 0.34.0
    `vllm/entrypoints/serve/instrumentator/metrics.py:64-74`; instrumentator 8.1.0
    `instrumentation.py:286-302`; shown on the real server by
    tests/lab/test_conformance_values.py)."""
    server = wait_ready(start_vllm(started, container, drafter=drafter))
    for accept in ("text/plain; version=0.0.4", "application/openmetrics-text"):
        status, body, content_type = get(server.port, "/metrics", accept)
        assert (status, content_type) == (200, CONTENT_TYPE_LATEST), accept
        assert "\nvllm:spec_decode_num_drafts_total{" in body
        assert not body.endswith("# EOF\n")


RUNNER = "VLLM_USE_V2_MODEL_RUNNER"
V1_REFUSED = "ValueError: Model Runner V1 does not support: mixed sliding/full dflash drafts"
WINDOWLESS = (
    "ValueError: DFlash sliding attention requires a window size configured in "
    "dflash_config.swa_window_size or the top-level sliding_window."
)


def last_line(output: str) -> str:
    return output.rstrip().splitlines()[-1]


@pytest.mark.parametrize("value", ["0", "true", "2", "01"])
def test_0_34_refuses_every_runner_value_but_1(
    container: ContainerPaths, drafter: Path, started: list, value: str
) -> None:
    output = started_and_died(
        started, container, drafter, **{VLLM_VERSION_ENV: "0.34.0", RUNNER: value}
    )
    assert last_line(output) == (
        f"ValueError: VLLM_USE_V2_MODEL_RUNNER={value} is no longer supported: "
        "Model Runner V1 has been removed. Unset this variable."
    )


def test_0_34_logs_runner_1_as_redundant_and_serves(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    env = {VLLM_VERSION_ENV: "0.34.0", RUNNER: "1"}
    server = wait_ready(start_vllm(started, container, drafter=drafter, env=env))
    assert "VLLM_USE_V2_MODEL_RUNNER=1 is redundant and can be unset" in server.output()


def test_older_releases_read_the_runner_variable_as_an_integer(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    output = started_and_died(
        started, container, drafter, **{VLLM_VERSION_ENV: "0.27.1", RUNNER: "true"}
    )
    assert last_line(output) == "ValueError: invalid literal for int() with base 10: 'true'"
    env = {VLLM_VERSION_ENV: "0.27.1", RUNNER: "2"}  # bool(int("2")): the V2 runner
    wait_ready(start_vllm(started, container, drafter=drafter, env=env))


@pytest.mark.parametrize("version", ["0.26.0", "0.28.0", "0.29.0", "0.33.0", "0.34.0"])
def test_releases_since_0_26_serve_a_mixed_drafter_with_the_variable_unset(
    container: ContainerPaths, drafter: Path, started: list, version: str
) -> None:
    env = {VLLM_VERSION_ENV: version, RUNNER: None}
    server = wait_ready(start_vllm(started, container, drafter=drafter, env=env))
    assert measure(server.port, requests=4).per_position[0] > 0.7


@pytest.mark.parametrize("version", ["0.29.0", "0.33.0"])
def test_v2_default_releases_refuse_a_mixed_drafter_on_v1(
    container: ContainerPaths, drafter: Path, started: list, version: str
) -> None:
    output = started_and_died(
        started, container, drafter, **{VLLM_VERSION_ENV: version, RUNNER: "0"}
    )
    assert last_line(output) == V1_REFUSED


@pytest.mark.parametrize(
    ("version", "refused"), [("0.24.0", False), ("0.26.0", True), ("0.34.0", True)]
)
def test_a_windowless_sliding_drafter_is_refused_where_the_release_checks(
    container: ContainerPaths, started: list, version: str, refused: bool
) -> None:
    """The published Qwen3.6 drafter config without use_sliding_window: transformers drops
    its sliding_window, and vLLM >= 0.25 finds no window for the sliding layers."""
    windowless = {**RENDERED, "use_sliding_window": False}
    drafter = deploy_drafter(container, "r2", windowless, DRAFTER_NAME)
    env = {VLLM_VERSION_ENV: version, RUNNER: None}
    if refused:
        assert last_line(started_and_died(started, container, drafter, **env)) == WINDOWLESS
    else:
        wait_ready(start_vllm(started, container, drafter=drafter, env=env))


def test_per_request_spec_decode_metrics_is_a_flag_from_0_29(
    container: ContainerPaths, drafter: Path, started: list
) -> None:
    flag = ("--per-request-spec-decode-metrics", "summary")
    env = {VLLM_VERSION_ENV: "0.29.0"}
    wait_ready(start_vllm(started, container, *flag, drafter=drafter, env=env))
    old = start_vllm(started, container, *flag, drafter=drafter, env={VLLM_VERSION_ENV: "0.28.0"})
    assert old.process.wait(timeout=20) == 2
    assert last_line(old.output()).endswith(
        "error: unrecognized arguments: --per-request-spec-decode-metrics summary"
    )


def test_an_unknown_release_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"knows releases 0\.19\.1, .*, 0\.34\.0; not '0\.99\.0'"):
        release("0.99.0")


@pytest.mark.parametrize(("version", "fingerprinted"), [("0.20.2", False), ("0.21.0", True)])
def test_responses_carry_a_fingerprint_from_0_21(
    container: ContainerPaths, started: list, version: str, fingerprinted: bool
) -> None:
    """vllm_releases.yaml, system_fingerprint: null before 0.21.0, then
    "vllm-<version>-<hash8>" (no parallelism suffix at tensor parallel size 1)."""
    flags = ("--gpu-memory-utilization", "0.1")  # side by side
    server = wait_ready(start_vllm(started, container, *flags, env={VLLM_VERSION_ENV: version}))
    fingerprint = complete(server.port, 2)["system_fingerprint"]
    if fingerprinted:
        assert re.fullmatch(rf"vllm-{re.escape(version)}-[0-9a-f]{{8}}", fingerprint), fingerprint
    else:
        assert fingerprint is None
