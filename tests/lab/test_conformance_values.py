"""The stand-in answers bad requests with the real server's values, not only its shapes:
the same requests to the real vLLM 0.32.0 for CPUs (`real_lab`) and to the lab's
stand-in claiming 0.32.0, each launched by its container's own `vllm` with the tiny
target and no drafter; status codes and error bodies are required to be equal.

The requests: temperature 3 (0.32.0 `vllm/sampling_params.py:665-669`, "must be in
[0, 2]"), max_tokens 0 (`:688-692`, "must be at least 1"), a model the server does not
serve, and a body that is not JSON; and `/metrics` asked for OpenMetrics, which vLLM
answers in the classic text format whatever the Accept header (0.32.0
`vllm/entrypoints/serve/instrumentator/metrics.py:64-74`: the instrumentator's `expose`
route answers `generate_latest`, and the negotiating `make_asgi_app` mount of `:77-81` is
never reached).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import LabHandle, start_lab

from orchestrator.lab.cluster import Lab
from orchestrator.lab.paths import ContainerPaths

pytestmark = [pytest.mark.lab, pytest.mark.realvllm]

VERSION = "0.32.0"
PORT = 8110
READY_TIMEOUT = 600.0
PROMPT = "The quick brown fox"
GOOD = {"model": "tiny", "max_tokens": 4, "temperature": 0}
BAD_BODIES = {
    "temperature 3": {**GOOD, "temperature": 3},
    "max_tokens 0": {**GOOD, "max_tokens": 0},
    "unknown model": {**GOOD, "model": "no-such-model"},
}
ENDPOINTS = {
    "completion": ("/v1/completions", {"prompt": PROMPT}),
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}),
}


def health(address: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://{address}:{PORT}/health", timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, urllib.error.URLError):
        return None


def ask(address: str, path: str, data: bytes, headers: dict[str, str]) -> tuple[int, bytes, str]:
    """Status, body and Content-Type of one request (GET when `data` is empty)."""
    request = urllib.request.Request(
        f"http://{address}:{PORT}{path}", data=data or None, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read(), answer.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "")


def observe(container: ContainerPaths, address: str, log: Path) -> dict[str, object]:
    """Launch the container's `vllm serve` on the tiny target, send every bad request
    and the OpenMetrics-asking /metrics, then stop it (its own process group only)."""
    models = container.rootfs / "opt" / "models"
    args = ["serve", str(models / "tiny-target"), "--served-model-name", "tiny"]
    args += ["--host", address, "--port", str(PORT), "--max-model-len", "2048"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(container.vllm), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=container.rootfs,
            start_new_session=True,
        )
    seen: dict[str, object] = {}
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while health(address) != 200:
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, f"not ready in {READY_TIMEOUT:.0f} s"
            time.sleep(0.5)
        json_type = {"Content-Type": "application/json"}
        for endpoint, (path, extra) in ENDPOINTS.items():
            for case, body in BAD_BODIES.items():
                data = json.dumps({**body, **extra}).encode()
                code, answer, _ = ask(address, path, data, json_type)
                seen[f"{endpoint}: {case}"] = (code, json.loads(answer))
            code, answer, _ = ask(address, path, b"{not json", json_type)
            seen[f"{endpoint}: bad JSON"] = (code, json.loads(answer))
        code, _, content_type = ask(
            address, "/metrics", b"", {"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        seen["metrics content type"] = (code, content_type)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    return seen


def only(lab: Lab) -> tuple[ContainerPaths, str]:
    (container,) = lab.containers()
    return ContainerPaths(Path(container.root)), container.address


@pytest.fixture(scope="module")
def standin_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("standin-values")
    lab = start_lab(root / "lab", vllm_version=VERSION, containers_per_host=1, direct_ssh=False)
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="module")
def answers(
    real_lab: LabHandle, standin_lab: Lab, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, object]]:
    tmp = tmp_path_factory.mktemp("values")
    return {
        "real": observe(*only(real_lab.lab), tmp / "real.log"),
        "standin": observe(*only(standin_lab), tmp / "standin.log"),
    }


CASES = [f"{e}: {c}" for e in ENDPOINTS for c in (*BAD_BODIES, "bad JSON")]


@pytest.mark.parametrize("case", CASES)
def test_a_bad_request_gets_the_real_servers_status_and_error(
    answers: dict[str, dict[str, object]], case: str
) -> None:
    """Status code and the whole error body (message, type, param, code) as 0.32.0's."""
    assert answers["standin"][case] == answers["real"][case]


def test_metrics_in_the_classic_text_format_whatever_the_accept_header(
    answers: dict[str, dict[str, object]],
) -> None:
    """OpenMetrics asked for, the classic text format answered (0.32.0 and the stand-in)."""
    real = answers["real"]["metrics content type"]
    assert real[0] == 200 and str(real[1]).startswith("text/plain; version=")
    assert answers["standin"]["metrics content type"] == real
