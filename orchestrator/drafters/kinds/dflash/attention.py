"""DFlash rules on the drafter's attention: layer types, the sliding window the server
actually sees, and the block size."""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds.dflash.drafter import (
    DEFAULT_BLOCK_SIZE,
    LAYER_TYPES,
    SLIDING,
    DrafterInputs,
    configured_block_size,
    is_int,
)


def layer_type_findings(c: DrafterInputs) -> Iterator[Finding]:
    types = c.drafter.get("layer_types")
    count = c.drafter.get("num_hidden_layers")
    if types is None and c.profile is None:
        yield Finding.warning(
            "layer_types",
            "layer_types missing: they are derived from use_sliding_window and may not be "
            "what the drafter was trained with; set them from the published config",
            expected=f"{count} of {list(LAYER_TYPES)}",
        )
    elif types is not None and (
        not isinstance(types, list)
        or len(types) != count
        or any(kind not in LAYER_TYPES for kind in types)
    ):
        yield Finding.error(
            "layer_types",
            f"layer_types must list one of {list(LAYER_TYPES)} per drafter layer "
            f"(num_hidden_layers = {count})",
            expected=c.profile.layer_types if c.profile else f"{count} of {list(LAYER_TYPES)}",
            actual=types,
        )
    elif c.profile is not None and types != c.profile.layer_types:
        yield Finding.error(
            "layer_types",
            "layer_types differ from the published drafter: its layers attend over another "
            "span and acceptance falls with context length; use the profile's list",
            expected=c.profile.layer_types,
            actual=types,
        )
    yield from _sliding_window(c, types)


def server_window(config: dict) -> int | None:
    """The window vLLM gives sliding layers: `dflash_config.swa_window_size` when present,
    else `sliding_window` as transformers' Qwen3Config keeps it (only when
    `use_sliding_window` is true; otherwise it becomes None)."""
    nested = config.get("dflash_config")
    if isinstance(nested, dict) and "swa_window_size" in nested:
        value = nested["swa_window_size"]
    else:
        value = config.get("sliding_window") if config.get("use_sliding_window") is True else None
    return value if is_int(value) else None


def server_slides(config: dict) -> bool:
    """Whether vLLM runs any drafter layer with a sliding window (layer_types, or use_swa)."""
    types = config.get("layer_types")
    nested = config.get("dflash_config")
    use_swa = isinstance(nested, dict) and nested.get("use_swa") is True
    return (isinstance(types, list) and SLIDING in types) or use_swa


def _sliding_window(c: DrafterInputs, types: object) -> Iterator[Finding]:
    if not server_slides(c.drafter):
        return
    window = server_window(c.drafter)
    expected = server_window(c.profile.config) if c.profile else None
    raw = c.drafter.get("sliding_window")
    if window is None and is_int(raw) and raw > 0:
        yield Finding.error(
            "use_sliding_window",
            f"layer_types has {SLIDING} layers and sliding_window is {raw}, but "
            f"use_sliding_window is {c.drafter.get('use_sliding_window')!r}: transformers' "
            "Qwen3Config then sets sliding_window to None, so the server sees no window "
            "(vLLM refuses the drafter, or older builds run those layers as full attention "
            "and acceptance collapses on long contexts); set use_sliding_window: true",
            expected=True,
            actual=c.drafter.get("use_sliding_window"),
        )
    elif window is None or window <= 0:
        yield Finding.error(
            "sliding_window",
            f"layer_types has {SLIDING} layers but the server sees no positive window "
            f"(sliding_window {raw!r}): they need the window they were trained with; "
            "use the profile's",
            expected=expected if expected is not None else "a positive integer",
            actual=raw,
        )
    elif c.profile is not None and window != expected:
        yield Finding.error(
            "sliding_window",
            f"the server sees a sliding window of {window}, not the published drafter's "
            f"{expected}: acceptance falls with context length; use the profile's",
            expected=expected,
            actual=window,
        )


def block_size_findings(c: DrafterInputs) -> Iterator[Finding]:
    value = configured_block_size(c.drafter)
    if not is_int(value) or value < 2:
        yield Finding.warning(
            "block_size",
            "block_size is not an integer >= 2: no server reads it, but it says how many "
            "tokens the drafter was trained to propose (block_size - 1)",
            expected=c.profile.block_size if c.profile else DEFAULT_BLOCK_SIZE,
            actual=value,
        )
        return
    wanted = c.num_speculative_tokens
    if wanted is not None and wanted > value - 1:
        yield Finding.error(
            "num_speculative_tokens",
            f"num_speculative_tokens {wanted} exceeds block_size - 1 = {value - 1}: the drafter "
            "was trained to propose at most block_size - 1 tokens; use block_size - 1",
            expected=value - 1,
            actual=wanted,
        )
