"""The stand-in streams as the real server does: the same streamed requests to the real
vLLM 0.32.0 for CPUs and to the lab's stand-in claiming 0.32.0, each launched as orch
launches it (a self-drafting tiny target, per-request figures), and their server-sent
events compared chunk by chunk: the keys at each level and the type of each value, the
`object` of each chunk, where `finish_reason` is set and to what, the usage chunk that
`stream_options.include_usage` adds, and the `[DONE]` that ends the stream.

Chunks of one engine step's tokens repeat with only their text changing, and how many
there are depends on how many tokens each draft kept: a run of chunks of the same form
is compared as one."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conformance import PROMPT, READY_TIMEOUT, Kind, kind_of, shape, states_until
from labtools import LabHandle

from orchestrator.lab.cluster import Lab

pytestmark = [pytest.mark.lab, pytest.mark.realvllm]

STREAM_PORT = 8300
"""Apart from test_conformance's ports (8100 and the bad launches' after it)."""
DONE = "[DONE]"
BODY = {"model": "tiny", "max_tokens": 24, "temperature": 0, "stream": True, "ignore_eos": True}
"""Greedy, and every request runs to max_tokens on both servers (`finish_reason`
`length`): the tiny target's end-of-text token would end the real one's early."""
USAGE = {"stream_options": {"include_usage": True}}
CHAT = {"messages": [{"role": "user", "content": PROMPT}]}
REQUESTS = {
    "completion": ("/v1/completions", {"prompt": PROMPT}),
    "completion with usage": ("/v1/completions", {"prompt": PROMPT, **USAGE}),
    "chat": ("/v1/chat/completions", CHAT),
    "chat with usage": ("/v1/chat/completions", {**CHAT, **USAGE}),
}


def events(address: str, port: int, path: str, body: dict) -> list[str]:
    """The `data:` payloads of one streamed response, in order."""
    request = urllib.request.Request(
        f"http://{address}:{port}{path}",
        data=json.dumps({**BODY, **body}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        assert response.headers.get_content_type() == "text/event-stream"
        return [
            line.decode().removeprefix("data: ").strip()
            for line in response
            if line.startswith(b"data: ")
        ]


def form(data: str) -> object:
    """A chunk's form: its shape (`shape`), with its `object` and each choice's
    `finish_reason` as values; `[DONE]` as itself."""
    if data == DONE:
        return DONE
    chunk = json.loads(data)
    found = shape(chunk)
    assert isinstance(found, dict)
    if "object" in chunk:
        found["object"] = chunk["object"]
    choices = chunk.get("choices") or []  # one: n is 1, and `shape` keeps the first
    if choices and "finish_reason" in choices[0]:
        found["choices"][0]["finish_reason"] = choices[0]["finish_reason"]
    return found


def forms(payloads: list[str]) -> list[object]:
    """Each chunk's form, a run of equal forms as one."""
    out: list[object] = []
    for data in payloads:
        each = form(data)
        if not out or out[-1] != each:
            out.append(each)
    return out


def observe(kind: Kind, log: Path) -> dict[str, list[str]]:
    args = [
        *kind.serve_args(kind.self_draft(), STREAM_PORT),
        "--per-request-spec-decode-metrics",
        "summary",
    ]
    server = kind.launch(args, log)
    try:
        states_until(kind.address, STREAM_PORT, lambda s: s == 200, server.process, READY_TIMEOUT)
        return {
            name: events(kind.address, STREAM_PORT, path, body)
            for name, (path, body) in REQUESTS.items()
        }
    finally:
        server.stop()


@pytest.fixture(scope="module")
def streamed(
    real_lab: LabHandle, standin_lab: Lab, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, dict[str, list[str]]]]:
    tmp = tmp_path_factory.mktemp("streamed")
    yield {
        "real": observe(kind_of("real", real_lab.lab), tmp / "real-serve.log"),
        "standin": observe(kind_of("standin", standin_lab), tmp / "standin-serve.log"),
    }


@pytest.mark.parametrize("request_name", list(REQUESTS))
def test_streamed_chunks_have_the_real_servers_form(
    streamed: dict[str, dict[str, list[str]]], request_name: str
) -> None:
    real = streamed["real"][request_name]
    assert real[-1] == DONE and len(real) > 3, real
    last = json.loads(real[-2])
    if "usage" in request_name:
        assert last["choices"] == [] and last["usage"]["completion_tokens"] == BODY["max_tokens"]
    real_forms, standin_forms = forms(real), forms(streamed["standin"][request_name])
    assert standin_forms == real_forms, json.dumps(
        {"real": real_forms, "standin": standin_forms, "real events": real[:4] + real[-3:]},
        indent=1,
    )
