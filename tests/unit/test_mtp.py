"""The mtp kind: the target's MTP layers judged as vLLM 0.34.0 treats them.

Targets are the published configs (tests/fixtures/drafters): Qwen3.6-27B with its
text_config.mtp_num_hidden_layers 1, the shared reference copy of it that lacks
the field, and Qwen3-8B, which has no MTP layers. Expected verdicts cite the vLLM
0.34.0 code (paths under vllm/ in the wheel).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs, detect_kind, get_kind
from orchestrator.drafters.kinds.mtp import FAMILIES, KEYS, mtp_layers

FIXTURES = Path(__file__).parent.parent / "fixtures" / "drafters"
QWEN36 = FIXTURES / "Qwen3.6-27B.config.json"
REFERENCE_QWEN36 = FIXTURES / "reference_Qwen3.6-27B.config.json"
QWEN3_8B = FIXTURES / "Qwen3-8B.config.json"
LAYERS = "mtp_num_hidden_layers"


def target(path: Path = QWEN36, layers: object = 1) -> dict:
    """A target config; `layers` sets text_config.mtp_num_hidden_layers (None removes it)."""
    config = json.loads(path.read_text())
    nested = config.get("text_config", config)
    nested.pop(LAYERS, None)
    if layers is not None:
        nested[LAYERS] = layers
    return config


def check(config: dict, tokens: int | None = None) -> list[Finding]:
    return get_kind("mtp").check(CheckInputs({}, config, num_speculative_tokens=tokens))


def verdict(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.severity.value, f.field) for f in findings]


def test_the_published_target_with_one_mtp_layer_passes() -> None:
    assert check(target(), tokens=1) == []
    assert mtp_layers(target()) == ("qwen3_5", 1)


@pytest.mark.parametrize(
    ("layers", "tokens", "expected"),
    [
        # speculator_config.py:283-291: above n_predict, K must be a multiple of it
        (2, 3, [("error", "num_speculative_tokens")]),
        (2, 4, [("warning", "num_speculative_tokens")]),  # mtp/config.py:89-98: a warning
        (1, 3, [("warning", "num_speculative_tokens")]),  # 3 % 1 == 0: accepted, warned
        (2, 2, []),  # one step per MTP layer
        # speculator_config.py:283-291: K % 0 raises ZeroDivisionError at start
        (0, 1, [("error", LAYERS)]),
    ],
)
def test_num_speculative_tokens_against_the_mtp_layers(
    layers: int, tokens: int, expected: list
) -> None:
    assert verdict(check(target(layers=layers), tokens=tokens)) == expected


def test_a_refusal_quotes_vllm() -> None:
    [finding] = check(target(layers=2), tokens=3)
    assert '"num_speculative_tokens:3 must be divisible by n_predict=2"' in finding.message
    assert (finding.expected, finding.actual) == (2, 3)


def test_the_reference_config_without_the_field_builds_one_layer() -> None:
    # qwen3_5_mtp.py:84: getattr(config, "mtp_num_hidden_layers", 1); speculative.py:1104-1124
    reference = json.loads(REFERENCE_QWEN36.read_text())
    assert mtp_layers(reference) == ("qwen3_5", None)
    findings = check(reference, tokens=3)
    assert verdict(findings) == [("warning", LAYERS), ("warning", "num_speculative_tokens")]
    assert "vLLM builds 1 MTP layer" in findings[0].message


def test_a_target_without_an_mtp_conversion_drafts_with_the_whole_model() -> None:
    # mtp/config.py:42-55, speculator_config.py:404-426 (0.32.0 refused it instead)
    [finding] = check(json.loads(QWEN3_8B.read_text()), tokens=1)
    assert (finding.severity.value, finding.field, finding.actual) == (
        "error",
        "drafter.kind",
        "qwen3",
    )
    assert "WHOLE target" in finding.message


def test_a_misspelt_layer_count_names_the_key_vllm_reads() -> None:
    config = target(layers=None)
    config["text_config"]["num_mtp_hidden_layers"] = 2
    findings = check(config)
    assert ("error", "text_config.num_mtp_hidden_layers") in verdict(findings)
    [misspelt] = [f for f in findings if f.field == "text_config.num_mtp_hidden_layers"]
    assert "did you mean text_config.mtp_num_hidden_layers?" in misspelt.message


def test_every_family_and_key_names_its_source() -> None:
    for family in FAMILIES.values():
        assert family.source in KEYS.sources
    for key in KEYS.keys.values():
        assert key.source in KEYS.sources
    assert all("vllm 0.34.0" in source for source in KEYS.sources.values())


def test_an_mtp_target_config_is_recognised_as_no_drafter_config() -> None:
    assert detect_kind(target()).name == "mtp"
    assert detect_kind(target(layers=0)).name != "mtp"  # no MTP layers to draft with
    assert detect_kind(json.loads(QWEN3_8B.read_text())).name != "mtp"
    # published without the layer count: vLLM builds one (qwen3_5_mtp.py:84), not a drafter
    assert detect_kind(json.loads(REFERENCE_QWEN36.read_text())).name == "mtp"


# the num_nextn_predict_layers families: the count at the top level, read by model_type

DEEPSEEK_V3 = FIXTURES / "DeepSeek-V3.config.json"
NEXTN = "num_nextn_predict_layers"


def nextn_target(model_type: str = "deepseek_v3", layers: object = 1) -> dict:
    """DeepSeek-V3 as published, as `model_type`, with `layers` MTP layers (None: unset)."""
    config = json.loads(DEEPSEEK_V3.read_text())
    config["model_type"] = model_type
    config.pop(NEXTN)
    if layers is not None:
        config[NEXTN] = layers
    return config


@pytest.mark.parametrize("model_type", ["deepseek_v3", "deepseek_v32", "glm_moe_dsa"])
@pytest.mark.parametrize(
    ("layers", "tokens", "expected"),
    [
        # config/speculative.py:847-862: n_predict = num_nextn_predict_layers
        (1, 1, []),
        (2, 2, []),
        # speculator_config.py:283-291: above n_predict, a multiple of it or refused
        (2, 3, [("error", "num_speculative_tokens")]),
        (1, 2, [("warning", "num_speculative_tokens")]),  # mtp/config.py:89-98: a warning
        (0, 1, [("error", NEXTN)]),  # speculator_config.py:283-291: 1 % 0
    ],
)
def test_a_deepseek_style_target_by_its_nextn_layers(
    model_type: str, layers: int, tokens: int, expected: list
) -> None:
    assert verdict(check(nextn_target(model_type, layers), tokens=tokens)) == expected


def test_the_published_deepseek_v3_drafts_with_its_one_mtp_layer() -> None:
    assert mtp_layers(json.loads(DEEPSEEK_V3.read_text())) == ("deepseek_v3", 1)
    assert detect_kind(json.loads(DEEPSEEK_V3.read_text())).name == "mtp"


@pytest.mark.parametrize(
    ("model_type", "builds"),
    [
        # transformers 5.19.0 DeepseekV3Config: num_nextn_predict_layers defaults to 1
        # (configuration_deepseek_v3.py:79,117), so n_predict is 1 (speculative.py:847-862)
        ("deepseek_v3", 1),
        # qwen3_next_mtp.py:71, exaone_moe_mtp.py:56: getattr(config, ..., 1)
        ("qwen3_next", 1),
        ("exaone_moe", 1),
    ],
)
def test_an_unset_nextn_count_in_a_family_that_defaults_it(model_type: str, builds: int) -> None:
    findings = check(nextn_target(model_type, None), tokens=3)
    assert verdict(findings) == [("warning", NEXTN), ("warning", "num_speculative_tokens")]
    assert f"vLLM builds {builds} MTP layer" in findings[0].message
    assert detect_kind(nextn_target(model_type, None)).name == "mtp"


@pytest.mark.parametrize("model_type", ["deepseek_v32", "glm_moe_dsa", "ernie4_5_moe"])
def test_an_unset_nextn_count_vllm_cannot_size_is_only_a_warning(model_type: str) -> None:
    # speculative.py:847-862, 978-984: n_predict None, so num_speculative_tokens is checked
    # against nothing (speculator_config.py:277-279); the MTP model reads the count itself
    findings = check(nextn_target(model_type, None), tokens=3)
    assert verdict(findings) == [("warning", NEXTN)]
    assert "vLLM does not know how many" in findings[0].message
