"""The dflash kind: what a DFlash drafter config must agree with (its target, its weights,
its tokenizer, its published config), and how it is launched, verified and explained.

A DFlash drafter reads hidden states of chosen target layers and proposes a block
of tokens at once. A config.json guessed by hand (wrong layer ids, mask token,
layer types, a window the server never sees) still lets vLLM start; acceptance
then collapses. These rules catch that from the files alone. They are pure
functions on parsed JSON: drafter config, target config, tokenizer_config.json
and the merged safetensors header entries. Every key of the config is judged by
what vLLM does with it, from the key table `dflash_keys.json`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs, DrafterKind
from orchestrator.drafters.kinds.dflash.drafter import Published, names_dflash
from orchestrator.drafters.kinds.dflash.rules import check_dflash
from orchestrator.metrics.assess import FailureCauses

if TYPE_CHECKING:
    from orchestrator.drafters.profiles import Profile


class DFlash(DrafterKind):
    """Block-diffusion drafters (z-lab DFlash): a small model reading chosen target layers."""

    name = "dflash"
    config_template = "dflash/config.json.j2"
    key_fields = (
        "dflash_config",
        "layer_types",
        "sliding_window",
        "bos_token_id",
        "block_size",
        "num_target_layers",
        "num_hidden_layers",
        "hidden_size",
        "vocab_size",
    )
    failure_causes = FailureCauses(
        misaligned="dflash_config.target_layer_ids and mask_token_id",
        shallow="layer_types, sliding_window, use_sliding_window and dflash_config.swa_window_size",
    )

    def recognises(self, config: dict) -> bool:
        return names_dflash(config)

    def check(self, inputs: CheckInputs) -> list[Finding]:
        return check_dflash(
            inputs.drafter,
            inputs.target,
            tokenizer=inputs.tokenizer,
            tensors=inputs.tensors,
            drafter_files=inputs.drafter_files,
            profile=inputs.profile,
            num_speculative_tokens=inputs.num_speculative_tokens,
        )

    def describe(self, profile: Profile) -> dict[str, object]:
        published = Published(profile)
        return {
            "num_target_layers": profile.config.get("num_target_layers"),
            "target_layer_ids": published.target_layer_ids,
            "mask_token_id": published.mask_token_id,
        }


KIND = DFlash()
