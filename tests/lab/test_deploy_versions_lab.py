"""End to end on labs whose vLLM stand-ins claim a given version: what preflight reads and
judges before any restart, and what the server does when forced anyway."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from labdeploy import deploy, serving_pid, target
from labtools import FAST, LabHandle

from orchestrator.lab.releases import release

pytestmark = pytest.mark.lab

V2_ERROR = release("0.27.1").fact("mixed_dflash_drafter").error
"""The claimed release's words for a mixed drafter on V1, from the lab's data (read back
from the wheel at hand by tests/local/test_wheelfacts.py)."""
RUNNER_OFF = 'server.env={VLLM_USE_V2_MODEL_RUNNER: "0"}'
"""V1 forced: 0.26 - 0.28 refuse a mixed drafter there (unset, they pick V2 themselves)."""
COUNTERS = ("--set", "gate.acceptance_source=counters")
"""Releases before 0.29.0 have no per-request figures: the gate reads counters."""
PER_REQUEST = ("--set", "gate.acceptance_source=per_request")
AUTO_ON_0_27 = (
    "gate.acceptance_source: auto: vLLM 0.27.1 has no --per-request-spec-decode-metrics "
    "(vllm/config/observability.py (no such setting) in 0.27.0; first in 0.29.0), so the "
    "launch goes without it and the gate reads /metrics counter deltas"
)


def releases(lab: LabHandle, name: str) -> set[str]:
    return {p.name for p in (lab.deployment_dir(name) / "releases").iterdir()}


@pytest.mark.parametrize("lab", [{"vllm_version": "0.27.1"}], indirect=True)
def test_on_vllm_0_27_the_runner_variable_is_checked_before_the_restart(lab: LabHandle) -> None:
    """0.26 - 0.28 choose the V2 runner by themselves for a mixed drafter; `0` forces V1,
    which refuses it (vllm/config/vllm.py:599, qwen3_dflash.py:125 in 0.27.0)."""
    # Per-request figures asked for: they need a flag 0.27 lacks, preflight says what to set.
    code, refused = deploy(lab, "--limit", "ct200", *PER_REQUEST)
    assert code == 1, refused
    # orch's judgement of the release; the host's own vLLM refuses the flag beside it
    findings = target(refused, "ct200")["findings"]
    [finding] = [f for f in findings if f["field"] == "gate.acceptance_source"]
    assert finding["severity"] == "error"
    assert finding["message"].startswith(
        "vLLM 0.27.1 has no --per-request-spec-decode-metrics (vllm/config/observability.py "
        "(no such setting) in 0.27.0; first in 0.29.0): the server refuses the launch; set "
        "gate.acceptance_source: auto or counters"
    )
    assert not (lab.deployment_dir("ct200") / "releases").exists()

    # The default (auto) launches without the flag and the gate reads counters, saying why:
    # in the text report, then in the JSON one.
    text = lab.orch("deploy", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct201", *FAST)
    assert text.code == 0, text.stdout + text.stderr
    assert "figures from /metrics counter deltas (gate.acceptance_source: auto" in " ".join(
        text.stdout.split()
    ), text.stdout
    code, first = deploy(lab)
    assert code == 0, first
    assert target(first, "ct201")["result"] == "unchanged"  # the release auto chose is kept
    entry = target(first, "ct200")
    assert entry["result"] == "deployed", entry
    assert entry["server_version"] == "0.27.1"
    assert not [f for f in entry["findings"] if f["severity"] == "error"]
    assert entry["gate"]["source"] == "counters"
    assert "other clients' drafts enter the figures" in entry["gate"]["source_note"]
    assert [n for n in entry["notes"] if n.startswith(AUTO_ON_0_27)], entry["notes"]
    good = target(first, "ct200")["release"]
    pid = serving_pid(lab, "ct200")

    # With the V1 runner forced preflight stops it: nothing written, nothing restarted.
    code, refused = deploy(lab, "--limit", "ct200", "--set", RUNNER_OFF, *COUNTERS)
    assert code == 1
    entry = target(refused, "ct200")
    assert entry["result"] == "failed" and "preflight" in entry["error"]
    [finding] = [
        f for f in entry["findings"] if f["field"] == "server.env.VLLM_USE_V2_MODEL_RUNNER"
    ]
    assert finding["severity"] == "error"
    assert "forces V1" in finding["message"] and finding["message"].endswith("unset it")
    assert "vLLM 0.27.1" in finding["message"]
    assert releases(lab, "ct200") == {good}
    assert serving_pid(lab, "ct200") == pid

    # Forced, the server dies at start with vLLM's own error, the output shows it, and the
    # previous release comes back.
    forced = lab.orch(
        "deploy",
        "qwen-dflash",
        "-i",
        str(lab.inventory),
        "--limit",
        "ct200",
        "--force",
        "--set",
        RUNNER_OFF,
        *COUNTERS,
        *FAST,
    )
    assert forced.code == 1, forced.stdout + forced.stderr
    assert "did not become ready" in forced.stdout
    assert V2_ERROR and V2_ERROR in " ".join(forced.stdout.split())
    found = forced.stdout.split("Preflight had found: ", 1)[1].split("\n", 1)[0]
    assert "server.env.VLLM_USE_V2_MODEL_RUNNER '0' (expected 'unset')" in found  # orch's
    assert "drafter.config.layer_types 'NotImplementedError" in found  # the host's own check
    audit = json.loads((lab.deployment_dir("ct200") / "audit.log").read_text().splitlines()[-1])
    assert audit["result"] == "rolled_back"
    assert (lab.deployment_dir("ct200") / "current").readlink() == Path("releases") / good
    assert serving_pid(lab, "ct200") != pid


@pytest.mark.parametrize("lab", [{"vllm_version": "0.19.1"}], indirect=True)
def test_on_vllm_0_19_preflight_names_the_version_and_the_upgrade(lab: LabHandle) -> None:
    code, refused = deploy(lab, "--limit", "ct201", *COUNTERS)
    assert code == 1, refused
    entry = target(refused, "ct201")
    assert entry["result"] == "failed" and "preflight" in entry["error"]
    [finding] = [f for f in entry["findings"] if f["field"] == "server.version"]
    assert finding["severity"] == "error"
    assert finding["message"].startswith("vLLM 0.19.1 has no speculative method 'dflash'")
    assert finding["message"].endswith("upgrade to >= 0.26.0")
    assert not (lab.deployment_dir("ct201") / "releases").exists()
    assert not (lab.deployment_dir("ct201") / "server.pid").exists()


FORCED_V2 = 'server.env={VLLM_USE_V2_MODEL_RUNNER: "1"}'
V2_REFUSES_DRAFT_MODEL = (
    "ValueError: Model Runner V2 does not yet support: speculative method 'draft_model'"
)


@pytest.mark.parametrize("lab", [{"vllm_version": "0.27.1"}], indirect=True)
def test_on_vllm_0_27_forcing_v2_with_draft_model_is_refused_before_the_restart(
    lab: LabHandle,
) -> None:
    """0.26.0 vllm/config/vllm.py:1456-1457 validates the V2 runner the variable forces,
    :2158-2165 names draft_model, :2216-2225 raises (0.27.x the same): preflight refuses
    lab-draft-model with it, and the server forced anyway exits with vLLM's words."""
    common = ("-i", str(lab.inventory), "--limit", "ct200", "--set", FORCED_V2, *COUNTERS)
    refused = lab.orch("deploy", "lab-draft-model", "--json", *common, *FAST)
    assert refused.code == 1, refused.stdout + refused.stderr
    entry = target(refused.json, "ct200")
    assert entry["result"] == "failed" and "preflight" in entry["error"]
    [finding] = [
        f for f in entry["findings"] if f["field"] == "server.env.VLLM_USE_V2_MODEL_RUNNER"
    ]
    assert finding["severity"] == "error"
    assert V2_REFUSES_DRAFT_MODEL in finding["message"]
    assert not (lab.deployment_dir("ct200") / "releases").exists()

    forced = lab.orch("deploy", "lab-draft-model", *common, "--force", *FAST)
    assert forced.code == 1, forced.stdout + forced.stderr
    assert "did not become ready" in forced.stdout
    assert V2_REFUSES_DRAFT_MODEL in " ".join(forced.stdout.split())
