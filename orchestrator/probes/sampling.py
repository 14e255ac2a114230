"""How the gate's probes sample, and what the server would sample with otherwise.

Acceptance depends on the sampling as much as on the drafter: vLLM's draft
proposers draft greedily and its rejection sampler accepts a drafted token with
the target's probability of it at the request's temperature, so the same
drafter that accepts k tokens per draft greedily accepts almost none on a flat
distribution (docs/field-notes/gate.md, "Sampling"). The gate therefore sends its
sampling with every probe request, and records it with every verdict.

A request that leaves a sampling field unset gets the server's default: the
model's `generation_config.json` under `--generation-config auto` (vLLM's
default), merged with `--override-generation-config`, else OpenAI's neutral
values (temperature 1.0). 0.32.0: `config/model.py:1847-1900`
(`get_diff_sampling_param`), `entrypoints/openai/completion/protocol.py:303-358`
and `chat_completion/protocol.py:678-727` ("Priority: user -> server default
-> OpenAI default"); 0.34.0: `config/model.py:1884-1937`,
`completion/protocol.py:313-374`, `chat_completion/protocol.py:707-762`.
Production clients that send no sampling get those defaults; the probes do not.
"""

from __future__ import annotations

import shlex
from typing import Any

from orchestrator import remotejson
from orchestrator.drafters.findings import Finding
from orchestrator.playbook import Sampling

RequestFields = dict[str, Any]
"""Fields of a request body to vLLM's OpenAI-compatible server, or the sampling
defaults it applies to one: their names and values are vLLM's (0.32.0
`completion/protocol.py`)."""

GENERATION_CONFIG_FILE = "generation_config.json"
SENT = ("temperature", "top_p", "top_k")
"""The fields every probe request carries (and `seed` when the playbook sets one)."""
NEUTRAL: dict[str, float] = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
}
"""vLLM's defaults for the sampling fields `generation_config.json` can set (the
`_DEFAULT_SAMPLING_PARAMS` of 0.32.0 `completion/protocol.py:303-311`)."""


GREEDY = Sampling()
"""The playbook's default: greedy probes."""
SOURCES = f"the target's {GENERATION_CONFIG_FILE}, --override-generation-config"
"""Where the server's default sampling comes from, as findings name it."""


def request_fields(sampling: Sampling) -> RequestFields:
    """The body fields of one probe request (OpenAI's names; `top_k` is vLLM's)."""
    fields: RequestFields = {name: getattr(sampling, name) for name in SENT}
    if sampling.seed is not None:
        fields["seed"] = sampling.seed
    return fields


def describe(sampling: RequestFields) -> str:
    """`temperature 0 (greedy)` or `temperature 0.7, top_p 0.95, top_k 20, seed 1`."""
    if not sampling.get("temperature"):
        return "temperature 0 (greedy)" + (
            f", seed {sampling['seed']}" if sampling.get("seed") is not None else ""
        )
    return ", ".join(f"{name} {value:g}" for name, value in sampling.items() if value is not None)


def server_defaults(generation_config: bytes | None, launch_script: str) -> RequestFields | None:
    """The sampling defaults the server gives a request that leaves fields unset, from
    the target's `generation_config.json` and the launch's `--generation-config` /
    `--override-generation-config`; None when the launch names another folder (not read)."""
    source, overrides = "auto", {}
    try:
        words = shlex.split(launch_script, comments=True)
    except ValueError:
        words = []
    for index, word in enumerate(words):
        name, equals, value = word.partition("=")
        if not equals and index + 1 < len(words):
            value = words[index + 1]
        if name == "--generation-config":
            source = value
        elif name == "--override-generation-config":
            try:
                parsed = remotejson.loads(value)
            except ValueError:
                parsed = None
            overrides = parsed if isinstance(parsed, dict) else {}
    if source == "vllm":
        return {key: value for key, value in overrides.items() if key in NEUTRAL}
    if source != "auto":
        return None
    try:
        config = remotejson.loads(generation_config or b"{}")
    except ValueError:
        config = {}
    merged = {**(config if isinstance(config, dict) else {}), **overrides}
    return {key: merged[key] for key in NEUTRAL if merged.get(key) is not None}


def sampling_findings(defaults: RequestFields | None, sampling: Sampling) -> list[Finding]:
    """A warning when the server's defaults differ from the probes': the gate's figures
    are then not what requests that send no sampling get; fields the probes do not send
    (penalties, min_p) apply to the probes too."""
    if not defaults:
        return []
    probes = request_fields(sampling)
    differs = {
        key: value
        for key, value in defaults.items()
        if key in SENT and float(value) != float(probes[key])
    }
    applied = {
        key: value
        for key, value in defaults.items()
        if key not in SENT and float(value) != NEUTRAL[key]
    }
    findings = []
    if differs:
        shown = ", ".join(f"{key} {value:g}" for key, value in differs.items())
        findings.append(
            Finding.warning(
                "gate.probe.sampling",
                f"the server's default sampling ({SOURCES}) is {shown}: vLLM samples "
                "requests that leave these unset with it, while the gate probes at "
                f"{describe(probes)}; acceptance falls as temperature rises, so the gate's "
                "figures are not what such requests get. Set gate.probe.sampling to your "
                "clients' sampling to gate on theirs.",
                expected={key: probes[key] for key in differs},
                actual=differs,
            )
        )
    if applied:
        shown = ", ".join(f"{key} {value:g}" for key, value in applied.items())
        findings.append(
            Finding.warning(
                "gate.probe.sampling",
                f"the server's default sampling ({SOURCES}) sets {shown}, which the "
                "probes do not send: the server applies it to the gate's probe requests too.",
                actual=applied,
            )
        )
    return findings
