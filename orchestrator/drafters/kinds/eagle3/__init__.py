"""EAGLE-3 heads, in both formats vLLM loads, judged by what vLLM reads from them.

A speculators-format head (`speculators_model_type`, `speculators_config`,
`transformer_layer_config`) goes through vLLM's speculators converter, which
builds the head's config from `transformer_layer_config` plus a few top-level
keys; a plain-format head is a transformers model config with an `eagle_config`
block, kept whole. Either way vLLM checks almost nothing at start: a wrong
width, vocabulary or layer id fails at weight load or at the first forward, or
silently costs acceptance. These rules read the config as vLLM will hold it
(`served`, in `head`), then judge every key by the table `eagle3_keys.json` (file:line in
vLLM 0.34.0 for each fact): `rules` on the config, `layers` on the target layers it
reads, `weights` on its weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs, DrafterKind
from orchestrator.drafters.kinds.eagle3.head import (
    EAGLE3,
    LAYER_CONFIG,
    LAYER_IDS,
    NESTED_IDS,
    PLAIN,
    SPECULATORS,
    config_format,
    trained_steps,
    verifier,
)
from orchestrator.drafters.kinds.eagle3.rules import check_eagle3
from orchestrator.metrics.assess import FailureCauses

if TYPE_CHECKING:
    from orchestrator.drafters.profiles import Profile


class Eagle3(DrafterKind):
    """EAGLE-3 heads: speculators format (vllm-project/speculators) or plain (eagle_config)."""

    name = EAGLE3
    key_fields = (
        "speculators_model_type",
        "speculators_config",
        LAYER_CONFIG,
        "eagle_config",
        LAYER_IDS,
        "draft_vocab_size",
        "target_hidden_size",
    )
    failure_causes = FailureCauses(
        misaligned=f"{LAYER_IDS} (the target layers fed to the head; "
        f"{NESTED_IDS} only sets their count) and the target the head was trained for",
        shallow="num_speculative_tokens against the steps the head was trained for "
        "(speculators_config.proposal_methods[0].speculative_tokens)",
    )

    def recognises(self, config: dict) -> bool:
        found = config_format(config)
        if found == SPECULATORS:
            return config.get("speculators_model_type") in (None, EAGLE3, "peagle")
        return found == PLAIN

    def variant(self, config: dict) -> str | None:
        return config_format(config)

    def check(self, inputs: CheckInputs) -> list[Finding]:
        return check_eagle3(inputs)

    def describe(self, profile: Profile) -> dict[str, object]:
        return {
            "format": config_format(profile.config),
            "verifier": verifier(profile.config).get("name_or_path"),
            "speculative_tokens": trained_steps(profile.config),
        }


KIND = Eagle3()
