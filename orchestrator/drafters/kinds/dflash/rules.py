"""DFlash rules on the drafter against its target and its weights (architecture, the
profile's target, the dimensions, fc's width), and `check_dflash`: every rule, then every
key against the key table."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds.dflash.attention import block_size_findings, layer_type_findings
from orchestrator.drafters.kinds.dflash.drafter import (
    DFLASH_ARCHITECTURE,
    FC_WEIGHTS,
    IDS,
    KEYS,
    LAYER_WEIGHT,
    DrafterInputs,
    Published,
    is_int,
    names_dflash,
)
from orchestrator.drafters.kinds.dflash.layers import (
    effective_layer_id_findings,
    target_layer_id_findings,
)
from orchestrator.drafters.kinds.dflash.tokens import mask_embedding_findings, mask_token_findings
from orchestrator.drafters.modelfiles import text_config

if TYPE_CHECKING:
    from orchestrator.drafters.profiles import Profile


def check_dflash(
    drafter: dict,
    target: dict,
    *,
    tokenizer: dict | None = None,
    tensors: dict[str, dict] | None = None,
    drafter_files: Sequence[str] | None = None,
    profile: Profile | None = None,
    num_speculative_tokens: int | None = None,
) -> list[Finding]:
    """Every DFlash rule, then every key of the config against the key table.

    `target` is the target's whole config.json, `tokenizer` its
    tokenizer_config.json, `tensors` the drafter's merged safetensors header
    entries, `drafter_files` the names in the drafter dir, `profile` the
    published drafter it should equal. The rules come first, in rule order; a
    key they already reported is not reported again by the whole-config diff.
    """
    inputs = DrafterInputs(
        drafter,
        text_config(target),
        target,
        tokenizer,
        tensors,
        drafter_files,
        Published(profile) if profile else None,
        num_speculative_tokens,
    )
    findings = list(chain.from_iterable(rule(inputs) for rule in _RULES))
    by_key = KEYS.unknown_findings(drafter)
    if profile is not None:
        by_key += KEYS.difference_findings(drafter, profile.config, profile.name)
    reported = {finding.field for finding in findings}
    return findings + [f for f in by_key if not _covered(f.field, reported)]


def _covered(path: str, reported: set[str]) -> bool:
    """Whether a finding on `path` or on an object holding it was already made."""
    parts = path.split(".")
    return any(".".join(parts[:i]) in reported for i in range(1, len(parts) + 1))


def _architecture(c: DrafterInputs) -> Iterator[Finding]:
    names = c.drafter.get("architectures")
    if not names_dflash(c.drafter):
        yield Finding.error(
            "architectures",
            "architectures does not name a DFlash drafter: vLLM's dflash method needs "
            f'a DFlash model class; use ["{DFLASH_ARCHITECTURE}"]',
            expected=[DFLASH_ARCHITECTURE],
            actual=names,
        )


def _profile_target(c: DrafterInputs) -> Iterator[Finding]:
    if c.profile is None:
        return
    actual = {field: c.target.get(field) for field in c.profile.target}
    if actual != c.profile.target:
        yield Finding.error(
            "profile",
            f"profile {c.profile.name} was published for {c.profile.target_name}, not this "
            "target: a drafter only drafts well for the target it was trained on",
            expected=c.profile.target,
            actual=actual,
        )


_TARGET_DIM_HINTS = {
    "num_target_layers": "the drafter says it was trained on a target with another layer "
    "count; no server reads num_target_layers, so it changes nothing at serve time, but check "
    "that the drafter was trained on this target",
    "hidden_size": "the drafter cannot read the target's hidden states; "
    "use a drafter trained on this target",
    "vocab_size": "drafter and target disagree on token ids; use the target's vocab_size",
}
_TARGET_DIMS = (
    ("num_target_layers", "num_hidden_layers"),
    ("hidden_size", "hidden_size"),
    ("vocab_size", "vocab_size"),
)


def _target_dims(c: DrafterInputs) -> Iterator[Finding]:
    for field, target_field in _TARGET_DIMS:
        expected = c.target.get(target_field)
        if not is_int(expected):
            yield Finding.error(
                f"target.{target_field}",
                f"the target config has no integer {target_field} (in text_config or at the "
                "top level): is it the target model's config.json?",
                expected="an integer",
                actual=expected,
            )
        elif c.drafter.get(field) != expected:
            found = Finding.error if KEYS.keys[field].read else Finding.warning
            yield found(
                field,
                f"{field} differs from the target's {target_field}: {_TARGET_DIM_HINTS[field]}",
                expected=expected,
                actual=c.drafter.get(field),
            )


def _weights(c: DrafterInputs) -> Iterator[Finding]:
    if c.tensors is None:
        return
    yield from _fc_weight(c, c.tensors)
    layers = {int(m.group(1)) for name in c.tensors if (m := LAYER_WEIGHT.match(name))}
    declared = c.drafter.get("num_hidden_layers")
    if len(layers) != declared:
        yield Finding.error(
            "num_hidden_layers",
            f"num_hidden_layers is {declared} but the weights hold {len(layers)} drafter layers: "
            "vLLM fails to load them or leaves layers untrained; use the weights' count",
            expected=len(layers),
            actual=declared,
        )


def _fc_weight(c: DrafterInputs, tensors: dict[str, dict]) -> Iterator[Finding]:
    fc = next((tensors[name] for name in FC_WEIGHTS if name in tensors), None)
    if fc is None:
        yield Finding.error(
            "fc.weight",
            "no fc.weight in the drafter's weights: not a DFlash checkpoint, or a shard is missing",
            expected="[hidden, len(target_layer_ids) * hidden]",
        )
        return
    shape = fc["shape"]
    if len(shape) != 2 or shape[0] == 0 or shape[1] % shape[0]:
        yield Finding.error(
            "fc.weight",
            f"fc.weight has shape {shape}, not [hidden, n * hidden]: not a DFlash checkpoint",
            expected="[hidden, n * hidden]",
            actual=shape,
        )
        return
    hidden, trained = shape[0], shape[1] // shape[0]
    if c.drafter.get("hidden_size") != hidden:
        yield Finding.error(
            "hidden_size",
            f"hidden_size differs from the weights: fc.weight {shape} is for hidden size {hidden}",
            expected=hidden,
            actual=c.drafter.get("hidden_size"),
        )
    ids = c.layer_ids
    if ids is not None and len(ids) != trained:
        yield Finding.error(
            IDS,
            f"target_layer_ids has {len(ids)} ids but fc.weight {shape} was trained on "
            f"{trained} target layers: vLLM refuses the weights; use {trained} ids "
            "(the profile's)",
            expected=trained,
            actual=len(ids),
        )


_RULES: tuple[Callable[[DrafterInputs], Iterator[Finding]], ...] = (
    _architecture,
    _profile_target,
    _target_dims,
    target_layer_id_findings,
    effective_layer_id_findings,
    _weights,
    mask_token_findings,
    mask_embedding_findings,
    layer_type_findings,
    block_size_findings,
)
