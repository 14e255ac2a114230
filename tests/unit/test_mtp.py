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
