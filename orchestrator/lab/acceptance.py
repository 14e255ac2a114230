"""How well drafts are accepted, given the method and the config it was deployed with.

DFlash (below, in detail); EAGLE-3, MTP and n-gram at the end.

The lab's vLLM stand-in runs no model: it draws each draft's accepted length
from per-position conditional acceptance probabilities (the chance that
position i is accepted once positions before it were). They come from
comparing the deployed drafter config with the published one and with the
drafter's weights, with the figures seen in the field:

- as published: position 1 accepts about 0.8, mean acceptance length about
  4.2 at 15 speculative tokens;
- a key vLLM reads that says which hidden states, mask or model the drafter
  uses differs (`target_layer_ids`, `mask_token_id`, `is_neox_style`, rope,
  shapes: roles "layers" and "model" of the lab's own list of what vLLM reads,
  `dflash_reading.KEY_ROLES`), or the layer count does not match `fc.weight`:
  position 1 about 0.08, position 2 about 0.03, none later (mean about 1.1);
- the attention the server builds differs (layer types, the window it sees,
  causality: role "attention"): mean acceptance length about halved;
- keys no server reads (`bos_token_id`, `block_size`, ...) change nothing.
- sliding layers run as full attention (`swa_as_full_attention`): as above
  while the context is inside the drafter's sliding window; past it the
  drafter attends to context it was never trained on and the per-position
  curve collapses to 0.55, 0.25, 0.08, 0.02 and 0 from position 5 on (mean
  acceptance length about 1.9).

Every figure above is greedy; a request sampling at temperature T keeps
`sampling_factor(T)` of each position's acceptance.

Without a published config to compare with, the lab cannot vouch for the
drafter and serves the unaligned profile: a gate must not pass on an unknown.
"""

from __future__ import annotations

import random

from orchestrator.lab.dflash_reading import (
    LAYERS,
    MODEL,
    layer_ids,
    mtp_layer_count,
    roles_that_differ,
    text_config,
)

DEFAULT_BLOCK_SIZE = 16
TRAINED_FIRST = 0.80
TRAINED_STEP = 0.02
"""Trained profile: 0.80, 0.80, 0.78, ... 0.54; mean acceptance length 4.2 at 15 tokens."""
UNALIGNED = (0.08, 0.375)
"""Position 1 accepted in 8% of drafts, position 2 in 0.08 * 0.375 = 3%, none later."""
ATTENTION_MISMATCH_SCALE = 0.664
"""Scaling every position by it halves the trained mean at 15 tokens (4.2 -> 2.1)."""
LONG_CONTEXT_COLLAPSE = (0.55, 0.25, 0.08, 0.02)
"""Share of drafts accepting at least i+1 tokens once full attention runs past the window."""
ZERO_HEAD = 0.01
"""A drafter with a zero-initialised lm_head: position 1 accepted in about 1% of drafts."""
TOP1_BY_TEMPERATURE = (
    (0.05, 0.987),
    (0.3, 0.891),
    (0.7, 0.720),
    (1.0, 0.593),
    (2.0, 0.240),
    (5.0, 0.0135),
    (10.0, 0.0022),
)
"""(temperature, mean top-1 probability) of the lab's tiny target along its greedy
continuations of benchmarks/sampling.py's prompts, measured by that script: near 1 when
cold, toward 1/4096 (its vocabulary) as the distribution flattens."""
MAX_PROBABILITY = 0.98
REQUEST_SPREAD = 0.03
"""Standard deviation of the per-request multiplier (clipped to 0.9..1.1)."""


def _dflash(config: dict) -> dict:
    return config.get("dflash_config") or {}


def _block_size(config: dict) -> int:
    return int(_dflash(config).get("block_size", config.get("block_size", DEFAULT_BLOCK_SIZE)))


def _reads_wrong_states(deployed: dict, truth: dict, fc_in_features: int | None) -> bool:
    hidden = deployed.get("hidden_size") or truth.get("hidden_size")
    weights_disagree = (
        fc_in_features is not None
        and hidden is not None
        and fc_in_features != hidden * len(layer_ids(deployed))
    )
    return weights_disagree or bool({LAYERS, MODEL} & roles_that_differ(deployed, truth))


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
    scale = ATTENTION_MISMATCH_SCALE if "attention" in roles_that_differ(deployed, truth) else 1
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


def sampling_factor(temperature: float) -> float:
    """The share of greedy acceptance left when a request samples at `temperature`.

    vLLM's drafters draft greedily (`draft_sample_method` "greedy", 0.32.0
    `config/speculative.py:600`) and its rejection sampler accepts a drafted token with
    the target's probability of it at the request's temperature (no draft probabilities:
    `draft_prob = 1`, `rejection_sampler.py:872-884`). A drafted token the target ranks
    first is then kept with the target's top-1 probability: TOP1_BY_TEMPERATURE,
    interpolated linearly between the measured temperatures (from 1 at T = 0, where every
    aligned token is kept) and held at its last value past them
    (docs/field-notes/gate.md, "Sampling").
    """
    if temperature <= 0:
        return 1.0
    below = (0.0, 1.0)
    for above in TOP1_BY_TEMPERATURE:
        if temperature <= above[0]:
            share = (temperature - below[0]) / (above[0] - below[0])
            return below[1] + share * (above[1] - below[1])
        below = above
    return below[1]


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


# Other methods: each kind's published setup accepts well, its typical misconfiguration not.

EAGLE3_TRAINED = (0.75, 0.6, 0.5)
"""An EAGLE-3 head at its trained steps: mean acceptance length about 2.4 at 3 tokens;
steps past the trained ones halve again each time."""
MTP_FIRST = 0.85
MTP_RERUN = 0.5
"""An MTP layer: position 1 at 0.85; each further token reruns the same layer (0.5)."""
NGRAM = (0.35, 0.5)
"""Prompt lookup on the probe prompts: position 1 at 0.35, then 0.5 per position."""


def _eagle3_aligned(deployed: dict, truth: dict, target: dict) -> bool:
    """The head as published, reading a target of its own width and vocabulary."""
    layer = deployed.get("transformer_layer_config") or {}
    dims = text_config(target)
    reads = deployed.get("target_hidden_size") or layer.get("hidden_size")
    return (
        deployed == truth
        and reads == dims.get("hidden_size")
        and layer.get("vocab_size") == dims.get("vocab_size")
    )


def eagle3_profile(deployed: dict, truth: dict | None, target: dict, steps: int) -> list[float]:
    if truth is None or not _eagle3_aligned(deployed, truth, target):
        return _unaligned(steps)
    trained = list(EAGLE3_TRAINED)
    while len(trained) < steps:
        trained.append(trained[-1] / 2)
    return trained[:steps]


def mtp_profile(target: dict, steps: int) -> list[float]:
    """MTP heads declared by the target draft well; a target without them does not."""
    if not mtp_layer_count(target):
        return _unaligned(steps)
    return [MTP_FIRST] + [MTP_RERUN] * (steps - 1)


def draft_model_profile(drafts_with_target_weights: bool, steps: int) -> list[float]:
    """A target drafting for itself agrees with itself at every position (the real server,
    greedy: mean acceptance length exactly k + 1); another model as the lab has them
    (random weights) draws like an unaligned drafter."""
    return [1.0] * steps if drafts_with_target_weights else _unaligned(steps)


def ngram_profile(steps: int) -> list[float]:
    return [NGRAM[0]] + [NGRAM[1]] * (steps - 1)
