"""The gate against a server with an API key (the lab's stand-in, which guards vLLM's
prefixes as 0.34.0's `AuthenticationMiddleware` does): probes authenticate, /health and
/metrics stay open, and a refused key fails the gate saying so."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from loopback import CAUSES, LoopbackTransport, buckets, gate
from standins import (
    DRAFTER_NAME,
    RENDERED,
    build_container,
    deploy_drafter,
    start_vllm,
    stop_by_pid,
    target_dir,
    wait_ready,
)

from orchestrator.contract import jsonable
from orchestrator.gate import GateReport, run_gate
from orchestrator.secrets import ProbeKey

KEY = "lab-key-0123456789"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One server whose key comes from VLLM_API_KEY (no --api-key)."""
    container = build_container(tmp_path_factory.mktemp("auth"))
    drafter = deploy_drafter(container, "r1", RENDERED, DRAFTER_NAME)
    started: list[subprocess.Popen] = []
    try:
        server = start_vllm(
            started,
            container,
            "--gpu-memory-utilization",
            "0.1",
            drafter=drafter,
            env={"VLLM_API_KEY": KEY},
        )
        wait_ready(server)
        yield {"port": server.port, "model": str(target_dir(container)), "log": server.log}
    finally:
        for process in started:
            stop_by_pid(process)


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_stand_in_guards_vllms_prefixes_with_its_401(keyed: dict) -> None:
    port = keyed["port"]
    assert get(port, "/health")[0] == 200
    assert get(port, "/metrics")[0] == 200
    unauthorized = (401, b'{"error":"Unauthorized"}')
    for path in ("/v1/models", "/v2/anything", "/inference/x", "/cohere/y"):
        assert get(port, path) == unauthorized, path
    assert get(port, "/v1/models", {"Authorization": "Basic " + KEY}) == unauthorized
    assert get(port, "/v1/models", {"Authorization": "Bearer wrong"}) == unauthorized
    assert get(port, "/v1/models", {"Authorization": "bearer " + KEY})[0] == 200
    assert get(port, "/v2/anything", {"Authorization": "Bearer " + KEY})[0] == 404


def probe(keyed: dict, key: ProbeKey | None) -> GateReport:
    transport = LoopbackTransport()
    return run_gate(
        transport, "127.0.0.1", keyed["port"], keyed["model"], gate(), buckets(), CAUSES, key=key
    )


def test_probes_with_the_key_pass_and_without_it_fail_naming_the_key(keyed: dict) -> None:
    key = ProbeKey(KEY, "secret VLLM_API_KEY (server.secrets)")
    passed = probe(keyed, key)
    assert passed.verdict.outcome == "pass", passed.verdict.reason

    refused = probe(keyed, None)
    assert refused.verdict.outcome == "fail"
    assert "HTTP 401" in refused.verdict.reason
    assert "orch sent no key: give the server's key as server.secrets.VLLM_API_KEY" in (
        refused.verdict.reason
    )
    assert refused.explanation == refused.phases[0].refused  # not an acceptance diagnosis
    assert len(refused.phases) == 1

    wrong = probe(keyed, ProbeKey("old-key", "secret VLLM_API_KEY (server.secrets)"))
    assert "the key from secret VLLM_API_KEY (server.secrets) is not one the server accepts" in (
        wrong.verdict.reason
    )
    assert "old-key" not in repr(jsonable(wrong))
