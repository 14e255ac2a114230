"""The gate's sampling: the playbook field, the probe requests' fields, and the server
defaults preflight compares them with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.drafters.findings import Severity
from orchestrator.errors import InputError
from orchestrator.playbook import Sampling, load_playbook
from orchestrator.probes.endpoints import probe_endpoints
from orchestrator.probes.sampling import (
    describe,
    request_fields,
    sampling_findings,
    server_defaults,
)

ROOT = Path(__file__).resolve().parent.parent.parent
QWEN = ROOT / "playbooks" / "qwen-dflash.yaml"
QWEN3_GENERATION = json.dumps(
    {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "eos_token_id": 2}
).encode()
LAUNCH = "#!/bin/sh\nexec /opt/vllm/bin/vllm serve /m --port 8000\n"


def test_the_default_is_greedy_and_every_probe_sends_it() -> None:
    sampling = load_playbook(QWEN).gate.probe.sampling
    assert request_fields(sampling) == {"temperature": 0.0, "top_p": 1.0, "top_k": 0}
    for endpoint in probe_endpoints(["completions", "chat"], {}):
        body = endpoint.payload("m", "hi", 8, request_fields(sampling))
        assert (body["temperature"], body["top_p"], body["top_k"]) == (0.0, 1.0, 0)
        assert "seed" not in body
    assert describe(request_fields(sampling)) == "temperature 0 (greedy)"


def test_a_playbook_sets_its_production_sampling() -> None:
    sampling = load_playbook(
        QWEN,
        ["gate.probe.sampling={temperature: 0.7, top_p: 0.95, top_k: 20, seed: 7}"],
    ).gate.probe.sampling
    fields = {"temperature": 0.7, "top_p": 0.95, "top_k": 20, "seed": 7}
    assert request_fields(sampling) == fields
    assert describe(fields) == "temperature 0.7, top_p 0.95, top_k 20, seed 7"


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("gate.probe.sampling.temperature=-0.1", "Input should be greater than or equal to 0"),
        ("gate.probe.sampling.top_p=0", "Input should be greater than 0"),
        ("gate.probe.sampling.top_k=-1", "Input should be greater than or equal to 0"),
        ("gate.probe.sampling.temperature=.nan", "Input should be a finite number"),
        ("gate.probe.sampling.seed=-3", "Input should be greater than or equal to 0"),
    ],
)
def test_sampling_out_of_vllm_range_is_refused_naming_the_field(
    assignment: str, message: str
) -> None:
    field = assignment.split("=")[0]
    with pytest.raises(InputError, match=rf"^--set {field}: {field}: {message}"):
        load_playbook(QWEN, [assignment])


def test_an_unknown_sampling_key_is_refused() -> None:
    with pytest.raises(InputError, match=r"unknown field 'gate.probe.sampling.temprature'"):
        load_playbook(QWEN, ["gate.probe.sampling.temprature=0.7"])


def test_generation_config_defaults_apply_under_auto_and_merge_the_overrides() -> None:
    assert server_defaults(QWEN3_GENERATION, LAUNCH) == {
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
    }
    launch = LAUNCH.replace("8000", "8000 --override-generation-config '{\"temperature\": 1.0}'")
    assert server_defaults(QWEN3_GENERATION, launch)["temperature"] == 1.0
    assert server_defaults(None, LAUNCH) == {}
    assert server_defaults(b"not json", LAUNCH) == {}


def test_generation_config_vllm_ignores_the_file_and_another_folder_is_unknown() -> None:
    assert (
        server_defaults(QWEN3_GENERATION, LAUNCH.replace("8000", "8000 --generation-config vllm"))
        == {}
    )
    folder = LAUNCH.replace("8000", "8000 --generation-config=/srv/gen")
    assert server_defaults(QWEN3_GENERATION, folder) is None


def test_defaults_that_differ_from_the_probes_are_a_warning_naming_both() -> None:
    [finding] = sampling_findings(server_defaults(QWEN3_GENERATION, LAUNCH), Sampling())
    assert finding.severity == Severity.WARNING
    assert finding.field == "gate.probe.sampling"
    assert finding.actual == {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
    assert finding.expected == {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
    assert "is temperature 0.6, top_p 0.95, top_k 20" in finding.message
    assert "the gate probes at temperature 0 (greedy)" in finding.message


def test_probes_at_the_servers_defaults_draw_no_warning() -> None:
    production = Sampling(temperature=0.6, top_p=0.95, top_k=20)
    assert sampling_findings(server_defaults(QWEN3_GENERATION, LAUNCH), production) == []
    assert sampling_findings({}, Sampling()) == []
    assert sampling_findings(None, Sampling()) == []


def test_defaults_the_probes_do_not_send_apply_to_them_too() -> None:
    generation = json.dumps({"repetition_penalty": 1.05, "min_p": 0.0}).encode()
    [finding] = sampling_findings(server_defaults(generation, LAUNCH), Sampling())
    assert finding.actual == {"repetition_penalty": 1.05}
    assert "applies it to the gate's probe requests too" in finding.message
