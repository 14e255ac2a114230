"""How vLLM reads a DFlash drafter's config.json, as the lab's stand-in needs it.

Read from vLLM's own code, not from orch's drafter tables (see releases.py for why):
- transformers' Qwen3Config loads the file: `sliding_window` survives only with
  `use_sliding_window: true`, and absent `layer_types` slide from `max_window_layers`
  on when a window survives (transformers 5.19.0 `models/qwen3/configuration_qwen3.py:77-78,
  86-97`);
- `_resolve_layer_attention` (0.34.0 `models/qwen3_dflash.py:155-187`): `use_swa` makes
  every layer slide when no layer_types slides; a sliding layer's window is
  `dflash_config.swa_window_size`, else the loaded `sliding_window`;
- the keys the drafter reads (0.34.0 `qwen3_dflash.py`, getattr/`.get` reads at lines
  88-184, 352-388, 463-497, 873-889; layer ids: `v1/worker/gpu/spec_decode/eagle/
  eagle3_utils.py:103-135`), by what a wrong value breaks (`KEY_ROLES`).
"""

from __future__ import annotations

from typing import Any

Config = dict[str, Any]
"""A model's config.json as Hugging Face writes it and vLLM reads it: its keys are the
model's (the lab keeps its own name for it: it reads nothing of orch's drafter code)."""

SLIDING = "sliding_attention"
QWEN3_MAX_WINDOW_LAYERS = 28
"""Qwen3Config's default `max_window_layers` (configuration_qwen3.py)."""

LAYERS, MODEL, ATTENTION = "layers", "model", "attention"
KEY_ROLES: dict[str, str] = {
    # which target hidden states and mask feed the drafter
    "eagle_aux_hidden_state_layer_ids": LAYERS,
    "dflash_config.target_layer_ids": LAYERS,
    "target_layer_ids": LAYERS,
    "dspark_target_layer_ids": LAYERS,
    "dflash_config.layer_ids": LAYERS,
    "eagle_config": LAYERS,
    "dflash_config.mask_token_id": LAYERS,
    "mask_token_id": LAYERS,
    "use_aux_hidden_state": LAYERS,
    "dflash_config.use_aux_hidden_state": LAYERS,
    # how the drafter computes
    "architectures": MODEL,
    "model_type": MODEL,
    "hidden_size": MODEL,
    "intermediate_size": MODEL,
    "num_hidden_layers": MODEL,
    "num_attention_heads": MODEL,
    "num_key_value_heads": MODEL,
    "head_dim": MODEL,
    "hidden_act": MODEL,
    "rms_norm_eps": MODEL,
    "rope_theta": MODEL,
    "rope_parameters": MODEL,
    "rope_scaling": MODEL,
    "is_neox_style": MODEL,
    "attention_bias": MODEL,
    "add_swa_attention_sink_bias": MODEL,
    "dflash_config.attention_sink_bias": MODEL,
    "dflash_config.attention_value_scale": MODEL,
    "target_hidden_size": MODEL,
    "vocab_size": MODEL,
    "draft_vocab_size": MODEL,
    "logit_scale": MODEL,
    # causality; the window and layer types are judged as the attention built (below)
    "is_causal": ATTENTION,
    "dflash_config.causal": ATTENTION,
}
"""Keys vLLM reads from a DFlash drafter config; a key not here is read by no release
(`bos_token_id`, `block_size`, `num_target_layers`: z-lab's reference only)."""


def _dflash(config: Config) -> Config:
    nested = config.get("dflash_config")
    return nested if isinstance(nested, dict) else {}


def _value(config: Config, path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def loaded_window(config: Config) -> int | None:
    """`sliding_window` as Qwen3Config keeps it: only with `use_sliding_window: true`."""
    window = config.get("sliding_window") if config.get("use_sliding_window") is True else None
    return window if isinstance(window, int) else None


def layer_types(config: Config) -> list[str]:
    """The layer types as loaded: the file's, else derived by Qwen3Config."""
    types = config.get("layer_types")
    if isinstance(types, list):
        return [str(t) for t in types]
    count = int(config.get("num_hidden_layers") or 0)
    first = config.get("max_window_layers")
    first = first if isinstance(first, int) else QWEN3_MAX_WINDOW_LAYERS
    slides = loaded_window(config) is not None
    return [SLIDING if slides and i >= first else "full_attention" for i in range(count)]


def sliding_layers(config: Config) -> list[bool]:
    """Per layer, whether vLLM builds it with a sliding window (`use_swa` or layer_types)."""
    types = layer_types(config)
    any_sliding = SLIDING in types
    if _dflash(config).get("use_swa") is True and not any_sliding:
        return [True] * len(types)
    return [kind == SLIDING for kind in types]


def is_mixed(config: Config) -> bool:
    """Sliding and full layers together (vLLM's `_dflash_needs_multi_kv_group`)."""
    slides = sliding_layers(config)
    return 0 < sum(slides) < len(slides)


def window(config: Config) -> int | None:
    """The window vLLM gives sliding layers: `dflash_config.swa_window_size`, else the
    loaded `sliding_window`; None when no layer slides or none is configured."""
    if not any(sliding_layers(config)):
        return None
    size = _dflash(config).get("swa_window_size", loaded_window(config))
    return size if isinstance(size, int) else None


def windowless(config: Config) -> bool:
    """A sliding layer without a window: releases that check raise at start."""
    return any(sliding_layers(config)) and window(config) is None


def attention_built(config: Config) -> tuple[list[bool], int | None]:
    return sliding_layers(config), window(config)


def trained_attention(published: Config) -> tuple[list[bool], int | None]:
    """The attention the drafter was trained with, as its published file states it: its
    layer types with the file's `sliding_window`. A file may state a window that vLLM
    does not keep (z-lab's Qwen3.6-27B drafter sets no `use_sliding_window`, and vLLM
    refuses it as shipped); the deployed config must make vLLM build this."""
    stated = published.get("sliding_window") is not None
    return attention_built({**published, "use_sliding_window": stated})


def roles_that_differ(deployed: Config, published: Config) -> set[str]:
    """The roles of the read keys whose values differ, and `attention` when the server
    builds other layers or windows than the drafter was trained with. The window's own
    keys (`sliding_window`, `use_sliding_window`, `layer_types`) count only as the
    attention they build."""
    roles = {
        role for key, role in KEY_ROLES.items() if _value(deployed, key) != _value(published, key)
    }
    if attention_built(deployed) != trained_attention(published):
        roles.add(ATTENTION)
    return roles


def layer_ids(config: Config) -> list[int]:
    """The target layers whose states feed the drafter, as eagle3_utils picks them."""
    explicit = config.get("eagle_aux_hidden_state_layer_ids")
    if isinstance(explicit, list):
        return explicit
    ids = _dflash(config).get("target_layer_ids")
    if isinstance(ids, list):
        return [i + 1 for i in ids]
    return list(_dflash(config).get("layer_ids") or [])


def text_config(config: Config) -> Config:
    """The language model's part of a target config (multimodal targets nest it)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def conditional_generation(target: Config) -> bool:
    """A `*ForConditionalGeneration` target: its lm_head is not at `target_model.lm_head`."""
    return any(str(a).endswith("ForConditionalGeneration") for a in target.get("architectures", []))


MTP_LAYER_FIELDS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")
"""Where a target declares its MTP layers (0.34.0 `config/speculative.py:833-948`,
`:1038`)."""
UNSET_BUILDS_ONE = ("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text")
"""The qwen3_5 family (the lab's Qwen3.6-27B target), whose MTP model builds one layer
when the config declares none:
`getattr(config, "mtp_num_hidden_layers", 1)` (0.32.0 `models/qwen3_5_mtp.py:82`, 0.34.0
`:84`), and transformers 5.19.0's Qwen3_5TextConfig has no such field to default it."""


def mtp_layer_count(target: Config) -> int:
    text = text_config(target)
    for field in MTP_LAYER_FIELDS:
        count = target.get(field, text.get(field))
        if isinstance(count, int):
            return count
    return 1 if target.get("model_type") in UNSET_BUILDS_ONE else 0
