"""MTP: the target's own multi-token-prediction heads, no drafter dir.

vLLM's `--speculative-config '{"method": "mtp", ...}'` loads the draft from the
target's checkpoint and rewrites its config into an MTP model by model type
(`SpeculativeConfig.hf_config_override`): the number of MTP layers comes from
a model-type specific field. A target without them cannot serve the method.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs, DrafterKind
from orchestrator.drafters.modelfiles import CONFIG_FILE, text_config
from orchestrator.drafters.profiles import Profile, target_files
from orchestrator.metrics.assess import FailureCauses

MTP_LAYER_FIELDS = {
    "qwen3_5": "mtp_num_hidden_layers",
    "qwen3_5_moe": "mtp_num_hidden_layers",
    "qwen3_5_text": "mtp_num_hidden_layers",
    "qwen3_5_moe_text": "mtp_num_hidden_layers",
    "qwen3_next": "num_nextn_predict_layers",
    "deepseek_v3": "num_nextn_predict_layers",
    "deepseek_v32": "num_nextn_predict_layers",
    "glm_moe_dsa": "num_nextn_predict_layers",
    "ernie4_5_moe": "num_nextn_predict_layers",
    "exaone_moe": "num_nextn_predict_layers",
    "pangu_ultra_moe": "num_nextn_predict_layers",
}
"""Target model types vLLM turns into an MTP draft, and the field holding their MTP layer
count (vllm/config/speculative.py, SpeculativeConfig.hf_config_override)."""


def mtp_layers(target: dict) -> tuple[str | None, int | None]:
    """The target's model type and its declared MTP layer count (top level or text_config)."""
    model_type = target.get("model_type")
    field = MTP_LAYER_FIELDS.get(model_type) if isinstance(model_type, str) else None
    if field is None:
        return model_type, None
    count = target.get(field, text_config(target).get(field))
    return model_type, count if isinstance(count, int) else None


class Mtp(DrafterKind):
    """The target's MTP heads draft for it."""

    name = "mtp"
    needs_drafter_dir = False
    key_fields = ()
    failure_causes = FailureCauses(
        misaligned="that the target's checkpoint holds trained MTP weights (mtp.* tensors)",
        shallow="num_speculative_tokens against the target's MTP layer count: vLLM reruns "
        "the same MTP layer for every further step",
    )

    def recognises(self, config: dict) -> bool:
        return False  # no drafter config: the target is the drafter

    def check(self, inputs: CheckInputs) -> list[Finding]:
        return list(self._rules(inputs))

    def describe(self, profile: Profile) -> dict[str, object]:
        target = json.loads(target_files(profile.name)[CONFIG_FILE])
        return {"mtp_layers": mtp_layers(target)[1]}

    def _rules(self, c: CheckInputs) -> Iterator[Finding]:
        model_type, layers = mtp_layers(c.target)
        if model_type not in MTP_LAYER_FIELDS:
            yield Finding.error(
                "drafter.kind",
                f"vLLM serves the mtp method only for targets with MTP heads it knows "
                f"({', '.join(sorted(MTP_LAYER_FIELDS))}), not model_type {model_type!r}: "
                "use another drafter kind",
                expected=sorted(MTP_LAYER_FIELDS),
                actual=model_type,
            )
            return
        field = MTP_LAYER_FIELDS[model_type]
        if not layers:
            yield Finding.error(
                f"target.{field}",
                f"the target's config declares no MTP layers ({field}): its checkpoint has no "
                "heads to draft with; use another drafter kind",
                expected=">= 1",
                actual=layers,
            )
            return
        wanted = c.num_speculative_tokens
        if wanted is not None and wanted > layers:
            yield Finding.warning(
                "num_speculative_tokens",
                f"num_speculative_tokens {wanted} exceeds the target's {layers} MTP layer(s): "
                "vLLM runs the same layer again for each further token, and acceptance falls",
                expected=layers,
                actual=wanted,
            )


KIND = Mtp()
