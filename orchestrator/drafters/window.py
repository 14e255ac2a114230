"""The sliding window a DFlash drafter's sliding layers get from vLLM.

vLLM's qwen3_dflash.py takes `dflash_config.swa_window_size` over the
top-level `sliding_window`; the window only exists when some entry of
`layer_types` is `sliding_attention` (sources in docs/field-notes/drafters.md,
"The sliding window the server sees").
"""

from __future__ import annotations

from orchestrator.drafters.modelfiles import ModelConfig

SLIDING = "sliding_attention"


def served_window(config: ModelConfig) -> int | None:
    """The window in tokens, or None when no layer slides or no window is set."""
    if SLIDING not in (config.get("layer_types") or []):
        return None
    dflash = config.get("dflash_config") or {}
    window = dflash.get("swa_window_size") or config.get("sliding_window")
    return window if isinstance(window, int) and window > 0 else None
