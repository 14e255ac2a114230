"""The lab's vLLM stand-in behaves like the version it claims, as the capability table says.

Real processes on loopback; every one is stopped by its PID in the `processes` fixture.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from test_lab_standins import (
    DRAFTER_NAME,
    PUBLISHED,
    ContainerPaths,
    build_container,
    deploy_drafter,
    measure,
    processes,
    start_vllm,
    target_dir,
    wait_ready,
    wait_until,
)

from orchestrator.lab.layout import VLLM_VERSION_ENV
from orchestrator.lab.vllm_standin import load_drafting
from orchestrator.serving.capabilities import capabilities_for, load_table, newest_version

__all__ = ["processes"]  # the fixture, shared with test_lab_standins

REFUSED_ERROR = (
    "NotImplementedError: DFlash does not yet support mixed sliding/full attention via "
    "layer_types; see https://github.com/vllm-project/vllm/issues/40898."
)


@pytest.fixture
def container(tmp_path: Path) -> ContainerPaths:
    return build_container(tmp_path)


@pytest.fixture
def drafter(container: ContainerPaths) -> Path:
    return deploy_drafter(container, "r1", PUBLISHED, DRAFTER_NAME)


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
    assert done.stdout.strip() == newest_version() == str(load_table().newest_release)


def started_and_died(processes: list, container: ContainerPaths, drafter: Path, **env: str) -> str:
    server = start_vllm(processes, container, drafter=drafter, env=env)
    assert server.process.wait(timeout=20) == 1
    assert not list(container.servers_dir.glob("*.json"))
    return server.output()


def test_refusing_versions_refuse_a_mixed_drafter_even_on_the_v2_runner(
    container: ContainerPaths, drafter: Path, processes: list
) -> None:
    output = started_and_died(processes, container, drafter, **{VLLM_VERSION_ENV: "0.25.1"})
    assert output.rstrip().endswith(REFUSED_ERROR)


def test_versions_without_dflash_refuse_the_method(
    container: ContainerPaths, drafter: Path, processes: list
) -> None:
    output = started_and_died(processes, container, drafter, **{VLLM_VERSION_ENV: "0.19.1"})
    assert "validation error for SpeculativeConfig\nmethod" in output
    assert "input_value='dflash'" in output


def test_old_versions_run_sliding_layers_as_full_attention_and_keep_a_zero_head(
    container: ContainerPaths, drafter: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    target = json.loads((target_dir(container) / "config.json").read_text())
    speculative = {"method": "dflash", "model": str(drafter), "num_speculative_tokens": 15}

    old = load_drafting(speculative, container, capabilities_for("0.24.0"), target)
    assert old.swa_as_full_attention
    assert old.profile[0] < 0.02 and not any(old.profile[1:])

    current = load_drafting(speculative, container, capabilities_for("0.27.1"), target)
    assert not current.swa_as_full_attention
    assert current.profile[0] == pytest.approx(0.8, abs=0.02)

    causal_target = {**target, "architectures": ["Qwen3_5ForCausalLM"]}
    old_causal = load_drafting(speculative, container, capabilities_for("0.24.0"), causal_target)
    assert old_causal.profile == current.profile


def test_zero_head_version_accepts_almost_nothing_on_a_conditional_generation_target(
    container: ContainerPaths, drafter: Path, processes: list
) -> None:
    server = wait_ready(
        start_vllm(processes, container, drafter=drafter, env={VLLM_VERSION_ENV: "0.24.0"})
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


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def health_codes_from_listening(container: ContainerPaths, processes: list, version: str) -> list:
    flags = ("--gpu-memory-utilization", "0.1")  # two servers side by side
    server = start_vllm(processes, container, *flags, env={VLLM_VERSION_ENV: version})
    wait_until(lambda: listening(server.port) or server.process.poll() is not None)
    assert server.process.poll() is None, server.output()
    codes = [get(server.port, "/health")[0]]
    while codes[-1] != 200:
        codes.append(get(server.port, "/health")[0])
    return codes


def test_health_never_answers_503_while_warming_up(
    container: ContainerPaths, processes: list
) -> None:
    """health.py:33 answers 503 only for EngineDeadError, in every release 0.19.1 - 0.34.0."""
    for version in ("0.24.0", "0.27.1"):
        assert health_codes_from_listening(container, processes, version) == [200]


def test_metrics_follow_the_accept_header(
    container: ContainerPaths, drafter: Path, processes: list
) -> None:
    server = wait_ready(start_vllm(processes, container, drafter=drafter))
    status, body, content_type = get(server.port, "/metrics", "text/plain; version=0.0.4")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert "\nvllm:spec_decode_num_drafts_total{" in body

    status, body, content_type = get(server.port, "/metrics", "application/openmetrics-text")
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    assert "\nvllm_spec_decode_num_drafts_total{" in body
    assert "vllm:spec_decode_num_drafts_total{" not in body
    assert body.endswith("# EOF\n")
