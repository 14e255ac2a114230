"""How well a DFlash drafter's drafts are accepted, given the config it was deployed with.

The lab's vLLM stand-in runs no model: it draws each draft's accepted length
from per-position conditional acceptance probabilities (the chance that
position i is accepted once positions before it were). They come from
comparing the deployed drafter config with the published one and with the
drafter's weights, with the figures seen in the field:

- as published: position 1 accepts about 0.8, mean acceptance length about
  4.2 at 15 speculative tokens;
- `target_layer_ids` or `mask_token_id` differ from the published ones, or the
  layer count does not match `fc.weight`: the drafter reads the wrong hidden
  states, position 1 about 0.08, position 2 about 0.03, none later (mean
  about 1.1);
- `layer_types` or `sliding_window` differ: mean acceptance length about halved;
- `bos_token_id` differs: mean acceptance length about 10% lower;
- sliding layers run as full attention (`swa_as_full_attention`): as above
  while the context is inside the drafter's sliding window; past it the
  drafter attends to context it was never trained on and the per-position
  curve collapses to 0.55, 0.25, 0.08, 0.02 and 0 from position 5 on (mean
  acceptance length about 1.9).

Without a published config to compare with, the lab cannot vouch for the
drafter and serves the unaligned profile: a gate must not pass on an unknown.
"""

from __future__ import annotations

import random

DEFAULT_BLOCK_SIZE = 16
TRAINED_FIRST = 0.80
TRAINED_STEP = 0.02
"""Trained profile: 0.80, 0.80, 0.78, ... 0.54; mean acceptance length 4.2 at 15 tokens."""
UNALIGNED = (0.08, 0.375)
"""Position 1 accepted in 8% of drafts, position 2 in 0.08 * 0.375 = 3%, none later."""
ATTENTION_MISMATCH_SCALE = 0.664
"""Scaling every position by it halves the trained mean at 15 tokens (4.2 -> 2.1)."""
BOS_MISMATCH_SCALE = 0.959
"""Scaling every position by it lowers the trained mean by 10% at 15 tokens (4.2 -> 3.78)."""
LONG_CONTEXT_COLLAPSE = (0.55, 0.25, 0.08, 0.02)
"""Share of drafts accepting at least i+1 tokens once full attention runs past the window."""
ZERO_HEAD = 0.01
"""A drafter with a zero-initialised lm_head: position 1 accepted in about 1% of drafts."""
MAX_PROBABILITY = 0.98
REQUEST_SPREAD = 0.03
"""Standard deviation of the per-request multiplier (clipped to 0.9..1.1)."""


def _dflash(config: dict) -> dict:
    return config.get("dflash_config") or {}


def _block_size(config: dict) -> int:
    return int(_dflash(config).get("block_size", config.get("block_size", DEFAULT_BLOCK_SIZE)))


def _mask_token_id(config: dict) -> int | None:
    return _dflash(config).get("mask_token_id", config.get("mask_token_id"))


def _layer_types(config: dict) -> list[str]:
    """Absent `layer_types` means every layer attends fully (older checkpoints)."""
    return config.get("layer_types") or ["full_attention"] * config.get("num_hidden_layers", 0)


def _sliding_window(config: dict) -> int | None:
    """The window only matters when some layer slides."""
    return config.get("sliding_window") if "sliding_attention" in _layer_types(config) else None


def _reads_wrong_states(deployed: dict, truth: dict, fc_in_features: int | None) -> bool:
    layer_ids = _dflash(deployed).get("target_layer_ids") or []
    hidden = deployed.get("hidden_size") or truth.get("hidden_size")
    weights_disagree = (
        fc_in_features is not None
        and hidden is not None
        and fc_in_features != hidden * len(layer_ids)
    )
    return (
        layer_ids != _dflash(truth).get("target_layer_ids")
        or _mask_token_id(deployed) != _mask_token_id(truth)
        or weights_disagree
    )


def _attention_differs(deployed: dict, truth: dict) -> bool:
    same_layers = _layer_types(deployed) == _layer_types(truth)
    same_window = _sliding_window(deployed) == _sliding_window(truth)
    return not (same_layers and same_window)


def _trained(positions: int) -> list[float]:
    """The published drafter: 0.8 at positions 1 and 2, then slowly falling."""
    return [max(TRAINED_FIRST - TRAINED_STEP * max(i - 1, 0), 0.0) for i in range(positions)]


def _unaligned(positions: int) -> list[float]:
    return [UNALIGNED[i] if i < len(UNALIGNED) else 0.0 for i in range(positions)]


def acceptance_profile(
    deployed: dict, truth: dict | None, fc_in_features: int | None
) -> list[float]:
    """Conditional acceptance probability per draft position (block_size - 1 positions).

    `truth` is the published config (None when unknown); `fc_in_features` the
    second dimension of the drafter's `fc.weight` (None when not read).
    """
    positions = _block_size(truth or deployed) - 1
    if truth is None or _reads_wrong_states(deployed, truth, fc_in_features):
        return _unaligned(positions)
    scale = 1.0
    if _attention_differs(deployed, truth):
        scale *= ATTENTION_MISMATCH_SCALE
    if deployed.get("bos_token_id") != truth.get("bos_token_id"):
        scale *= BOS_MISMATCH_SCALE
    return [p * scale for p in _trained(positions)]


def collapsed_past_window(profile: list[float]) -> list[float]:
    """The profile once sliding layers run as full attention over a context past their window.

    Never better than `profile` at any position: a drafter that already misses keeps missing.
    """
    reach = (1.0, *LONG_CONTEXT_COLLAPSE)
    collapse = [reach[i + 1] / reach[i] if i + 1 < len(reach) else 0.0 for i in range(len(profile))]
    return [min(p, c) for p, c in zip(profile, collapse, strict=True)]


def zero_head_profile(positions: int) -> list[float]:
    """Near-zero acceptance whatever the config: the drafter's head is all zeros."""
    return [ZERO_HEAD if i == 0 else 0.0 for i in range(positions)]


def _position_probability(profile: list[float], position: int, multiplier: float) -> float:
    if position >= len(profile):
        return 0.0
    return min(profile[position] * multiplier, MAX_PROBABILITY)


def expected_acceptance_length(profile: list[float], num_speculative_tokens: int) -> float:
    """1 + expected accepted tokens per draft (the bonus token counts), as vLLM reports it."""
    total, reach = 1.0, 1.0
    for position in range(num_speculative_tokens):
        reach *= _position_probability(profile, position, 1.0)
        total += reach
    return total


def request_multiplier(rng: random.Random) -> float:
    """Per-request spread: some prompts are easier to draft for than others."""
    return min(max(rng.gauss(1.0, REQUEST_SPREAD), 0.9), 1.1)


def sample_accepted(
    profile: list[float], num_speculative_tokens: int, multiplier: float, rng: random.Random
) -> int:
    """Accepted tokens of one draft: positions accepted in order until the first rejection."""
    for position in range(num_speculative_tokens):
        if rng.random() >= _position_probability(profile, position, multiplier):
            return position
    return num_speculative_tokens
