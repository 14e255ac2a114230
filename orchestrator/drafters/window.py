"""The sliding window a DFlash drafter's sliding layers get from vLLM.

vLLM's qwen3_dflash.py (`_resolve_layer_attention`, 0.25.0 to 0.34.0; 0.34.0
`vllm/model_executor/models/qwen3_dflash.py:161-180`) slides a layer when
`layer_types` names it `sliding_attention`, and slides every layer when
`dflash_config.use_swa` is set and no entry of `layer_types` slides (or there is
none); a sliding layer's window is `dflash_config.swa_window_size` when that key
is present, else the top-level `sliding_window` (sources in
docs/field-notes/drafters.md, "The sliding window the server sees").
"""

from __future__ import annotations

from orchestrator.drafters.modelfiles import ModelConfig

SLIDING = "sliding_attention"


def any_layer_slides(config: ModelConfig) -> bool:
    """Some layer slides: one named so in `layer_types`, or all by `dflash_config.use_swa`."""
    dflash = config.get("dflash_config") or {}
    return SLIDING in (config.get("layer_types") or []) or bool(dflash.get("use_swa", False))


def served_window(config: ModelConfig) -> int | None:
    """The window in tokens, or None when no layer slides or no window is set."""
    if not any_layer_slides(config):
        return None
    dflash = config.get("dflash_config") or {}
    key = "swa_window_size"
    window = dflash[key] if key in dflash else config.get("sliding_window")
    return window if isinstance(window, int) and window > 0 else None
