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

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, pairwise
from typing import TYPE_CHECKING

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.keytable import load_key_table
from orchestrator.drafters.kinds import CheckInputs, DrafterKind
from orchestrator.drafters.modelfiles import text_config
from orchestrator.metrics.assess import FailureCauses

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from orchestrator.drafters.profiles import Profile

DFLASH_ARCHITECTURE = "DFlashDraftModel"
DEFAULT_BLOCK_SIZE = 16
LAYER_TYPES = ("sliding_attention", "full_attention")
SLIDING = "sliding_attention"

_LAYER_WEIGHT = re.compile(r"^(?:model\.)?layers\.(\d+)\.")
_FC_WEIGHTS = ("fc.weight", "model.fc.weight")

IDS = "dflash_config.target_layer_ids"
MASK = "dflash_config.mask_token_id"

KEYS = load_key_table(__package__, "dflash_keys.json")
"""Every key of a DFlash config orch knows, and what vLLM does with it."""


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's default target layers: evenly spaced over 1..n-3, or the middle one for k == 1.

    Uses Python's round() as z-lab's code does, so halves go to the even
    neighbour: (11, 3) gives [1, 4, 8], not [1, 5, 8].
    """
    if num_draft_layers < 1:
        raise ValueError(f"num_draft_layers must be >= 1, got {num_draft_layers}")
    if num_draft_layers > max(num_target_layers, 1):
        raise ValueError(
            f"{num_draft_layers} drafter layers cannot read from {num_target_layers} target layers"
        )
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    span = end - start
    return [round(start + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def block_size(config: dict) -> int:
    """Draft block size: inside dflash_config in newer checkpoints, top level in older ones."""
    value = _configured_block_size(config)
    if not _is_int(value) or value < 2:
        raise ValueError(f"block_size must be an integer >= 2, got {value!r}")
    return value


def _configured_block_size(config: dict) -> object:
    nested = config.get("dflash_config")
    if isinstance(nested, dict) and "block_size" in nested:
        return nested["block_size"]
    return config.get("block_size", DEFAULT_BLOCK_SIZE)


@dataclass(frozen=True)
class Published:
    """The fields of a published DFlash drafter's config that the rules compare with."""

    profile: Profile

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def target_name(self) -> str:
        return self.profile.target_name

    @property
    def target(self) -> dict[str, int]:
        return self.profile.target

    @property
    def config(self) -> dict:
        return self.profile.config

    @property
    def target_layer_ids(self) -> list[int]:
        return self.config["dflash_config"]["target_layer_ids"]

    @property
    def mask_token_id(self) -> int:
        return self.config["dflash_config"]["mask_token_id"]

    @property
    def layer_types(self) -> list[str]:
        return self.config["layer_types"]

    @property
    def sliding_window(self) -> int | None:
        return self.config.get("sliding_window")

    @property
    def block_size(self) -> int:
        return block_size(self.config)


@dataclass(frozen=True)
class _Inputs:
    drafter: dict
    target: dict  # the target's text-model fields
    target_top: dict  # the target's whole config.json
    tokenizer: dict | None
    tensors: dict[str, dict] | None
    drafter_files: Sequence[str] | None
    profile: Published | None
    num_speculative_tokens: int | None

    @property
    def dflash(self) -> dict:
        nested = self.drafter.get("dflash_config")
        return nested if isinstance(nested, dict) else {}

    @property
    def layer_ids(self) -> list[int] | None:
        ids = self.dflash.get("target_layer_ids")
        return ids if isinstance(ids, list) and all(_is_int(i) for i in ids) else None


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
    inputs = _Inputs(
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


def _architecture(c: _Inputs) -> Iterator[Finding]:
    names = c.drafter.get("architectures")
    if not KIND.recognises(c.drafter):
        yield Finding.error(
            "architectures",
            "architectures does not name a DFlash drafter: vLLM's dflash method needs "
            f'a DFlash model class; use ["{DFLASH_ARCHITECTURE}"]',
            expected=[DFLASH_ARCHITECTURE],
            actual=names,
        )


def _profile_target(c: _Inputs) -> Iterator[Finding]:
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


def _target_dims(c: _Inputs) -> Iterator[Finding]:
    for field, target_field in _TARGET_DIMS:
        expected = c.target.get(target_field)
        if not _is_int(expected):
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


def _target_layer_ids(c: _Inputs) -> Iterator[Finding]:
    if not isinstance(c.drafter.get("dflash_config"), dict):
        yield Finding.error(
            "dflash_config",
            "dflash_config missing: vLLM refuses a DFlash drafter without target_layer_ids "
            "and mask_token_id; use the profile's dflash_config",
            expected=c.profile.config["dflash_config"] if c.profile else "an object",
            actual=c.drafter.get("dflash_config"),
        )
        return
    ids = c.dflash.get("target_layer_ids")
    expected = c.profile.target_layer_ids if c.profile else None
    if ids is None:
        yield Finding.error(
            IDS,
            "target_layer_ids missing: vLLM refuses the drafter; use the profile's ids",
            expected=expected,
        )
        return
    if c.layer_ids is None:
        yield Finding.error(
            IDS,
            "target_layer_ids must be a list of integer layer ids",
            expected=expected,
            actual=ids,
        )
        return
    yield from _layer_ids_shape(ids, c.target.get("num_hidden_layers"))
    if c.profile is not None:
        if ids != c.profile.target_layer_ids:
            yield Finding.error(
                IDS,
                "target_layer_ids differ from the published drafter: vLLM starts but acceptance "
                "collapses to ~1.1; use the profile's ids",
                expected=c.profile.target_layer_ids,
                actual=ids,
            )
        return
    yield from _default_spacing(ids, c.target.get("num_hidden_layers"), c.drafter)


def _layer_ids_shape(ids: list[int], num_target_layers: object) -> Iterator[Finding]:
    if any(later <= earlier for earlier, later in pairwise(ids)):
        yield Finding.error(
            IDS,
            "target_layer_ids must be strictly increasing: the drafter concatenates the "
            "target's hidden states in layer order",
            expected=sorted(set(ids)),
            actual=ids,
        )
    if _is_int(num_target_layers) and any(not 0 <= i < num_target_layers for i in ids):
        yield Finding.error(
            IDS,
            f"target_layer_ids outside the target's layers 0..{num_target_layers - 1}: "
            "vLLM reads hidden states that do not exist",
            expected=f"ids in 0..{num_target_layers - 1}",
            actual=ids,
        )


def _default_spacing(ids: list[int], num_target_layers: object, drafter: dict) -> Iterator[Finding]:
    num_draft_layers = drafter.get("num_hidden_layers")
    if not (_is_int(num_target_layers) and _is_int(num_draft_layers)):
        return
    if not 1 <= num_draft_layers <= max(num_target_layers, 1):
        return  # no default spacing exists; the weights and shape rules report it
    default = build_target_layer_ids(num_target_layers, num_draft_layers)
    if ids != default:
        yield Finding.warning(
            IDS,
            f"target_layer_ids differ from the default spacing for {num_target_layers} target "
            f"and {num_draft_layers} drafter layers: right only if the drafter was trained "
            "with them; check its published config",
            expected=default,
            actual=ids,
        )


def _weights(c: _Inputs) -> Iterator[Finding]:
    if c.tensors is None:
        return
    yield from _fc_weight(c, c.tensors)
    layers = {int(m.group(1)) for name in c.tensors if (m := _LAYER_WEIGHT.match(name))}
    declared = c.drafter.get("num_hidden_layers")
    if len(layers) != declared:
        yield Finding.error(
            "num_hidden_layers",
            f"num_hidden_layers is {declared} but the weights hold {len(layers)} drafter layers: "
            "vLLM fails to load them or leaves layers untrained; use the weights' count",
            expected=len(layers),
            actual=declared,
        )


def _fc_weight(c: _Inputs, tensors: dict[str, dict]) -> Iterator[Finding]:
    fc = next((tensors[name] for name in _FC_WEIGHTS if name in tensors), None)
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


def _mask_token(c: _Inputs) -> Iterator[Finding]:
    if not isinstance(c.drafter.get("dflash_config"), dict):
        return  # reported by _target_layer_ids
    mask = c.dflash.get("mask_token_id")
    expected = c.profile.mask_token_id if c.profile else None
    if not _is_int(mask):
        state = "missing" if mask is None else "not an integer token id"
        yield Finding.error(
            MASK,
            f"mask_token_id {state}: masked block positions need the token the drafter was "
            "trained with; use the profile's id",
            expected=expected,
            actual=mask,
        )
        return
    vocab = c.target.get("vocab_size")
    if _is_int(vocab) and not 0 <= mask < vocab:
        yield Finding.error(
            MASK,
            f"mask_token_id outside the target's vocabulary 0..{vocab - 1}: "
            "vLLM cannot embed it; use the profile's id",
            expected=expected if expected is not None else f"an id in 0..{vocab - 1}",
            actual=mask,
        )
    if c.tokenizer is not None:
        yield from _mask_in_tokenizer(mask, c.tokenizer, expected)
    role = _reserved_token_ids(c.target_top, c.tokenizer).get(mask)
    if role:
        yield Finding.error(
            MASK,
            f"mask_token_id is the target's {role} token: real text contains it, so the "
            "drafter cannot tell masked positions apart; use the profile's id",
            expected=expected,
            actual=mask,
        )
    if c.profile is not None and mask != c.profile.mask_token_id:
        yield Finding.error(
            MASK,
            "mask_token_id differs from the published drafter: the drafter was trained with "
            "its own mask token and acceptance collapses; use the profile's id",
            expected=c.profile.mask_token_id,
            actual=mask,
        )


def _mask_in_tokenizer(mask: int, tokenizer: dict, expected: int | None) -> Iterator[Finding]:
    """A mask must be a special added token, or an unused embedding row past all added tokens."""
    added = _added_tokens(tokenizer)
    token = added.get(mask)
    if token is not None and token.get("special") is not True:
        yield Finding.error(
            MASK,
            f"mask_token_id is {token.get('content')!r}, an added token that is not special: "
            "it appears in text; use the profile's id",
            expected=expected,
            actual=mask,
        )
    elif token is None and added and mask < max(added):
        yield Finding.error(
            MASK,
            "mask_token_id is an ordinary text token of the target's tokenizer, not a special "
            "token: the drafter confuses it with text; use the profile's id",
            expected=expected,
            actual=mask,
        )


def _added_tokens(tokenizer: dict) -> dict[int, dict]:
    decoder = tokenizer.get("added_tokens_decoder")
    if not isinstance(decoder, dict):
        return {}
    return {
        int(key): value
        for key, value in decoder.items()
        if key.isdigit() and isinstance(value, dict)
    }


def _reserved_token_ids(target: dict, tokenizer: dict | None) -> dict[int, str]:
    """Ids of the target's bos/eos/pad tokens (config and tokenizer), with their role."""
    reserved: dict[int, str] = {}
    for config in (target, text_config(target)):
        for role in ("bos", "eos", "pad"):
            value = config.get(f"{role}_token_id")
            for token_id in value if isinstance(value, list) else [value]:
                if _is_int(token_id):
                    reserved[token_id] = role
    if tokenizer is not None:
        added = _added_tokens(tokenizer)
        ids = {token.get("content"): token_id for token_id, token in added.items()}
        for role in ("bos", "eos", "pad"):
            value = tokenizer.get(f"{role}_token")
            content = value.get("content") if isinstance(value, dict) else value
            if content in ids:
                reserved[ids[content]] = role
    return reserved


def _layer_types(c: _Inputs) -> Iterator[Finding]:
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
    return value if _is_int(value) else None


def server_slides(config: dict) -> bool:
    """Whether vLLM runs any drafter layer with a sliding window (layer_types, or use_swa)."""
    types = config.get("layer_types")
    nested = config.get("dflash_config")
    use_swa = isinstance(nested, dict) and nested.get("use_swa") is True
    return (isinstance(types, list) and SLIDING in types) or use_swa


def _sliding_window(c: _Inputs, types: object) -> Iterator[Finding]:
    if not server_slides(c.drafter):
        return
    window = server_window(c.drafter)
    expected = server_window(c.profile.config) if c.profile else None
    raw = c.drafter.get("sliding_window")
    if window is None and _is_int(raw) and raw > 0:
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


def _effective_layer_ids(c: _Inputs) -> Iterator[Finding]:
    """eagle_aux_hidden_state_layer_ids wins over target_layer_ids (vLLM adds 1 to those)."""
    aux = c.drafter.get("eagle_aux_hidden_state_layer_ids")
    if aux is None or c.layer_ids is None:
        return
    meant = [i + 1 for i in c.layer_ids]
    if aux != meant:
        yield Finding.error(
            "eagle_aux_hidden_state_layer_ids",
            "eagle_aux_hidden_state_layer_ids wins over dflash_config.target_layer_ids and "
            f"disagrees with them: vLLM reads {aux!r}, the target_layer_ids mean {meant}; "
            "remove it",
            expected=meant,
            actual=aux,
        )


MASK_EMBEDDING_FILE = "mask_embedding.pt"


def _mask_embedding(c: _Inputs) -> Iterator[Finding]:
    if c.drafter_files is None or MASK_EMBEDDING_FILE not in c.drafter_files:
        return
    yield Finding.warning(
        MASK_EMBEDDING_FILE,
        f"the drafter dir ships {MASK_EMBEDDING_FILE}: vLLM replaces the embedding of the mask "
        "token with it, and refuses to start when the file names another mask_token_id than "
        "the config; make sure it belongs to this drafter",
        actual=MASK_EMBEDDING_FILE,
    )


def _block_size(c: _Inputs) -> Iterator[Finding]:
    value = _configured_block_size(c.drafter)
    if not _is_int(value) or value < 2:
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


_RULES: tuple[Callable[[_Inputs], Iterator[Finding]], ...] = (
    _architecture,
    _profile_target,
    _target_dims,
    _target_layer_ids,
    _effective_layer_ids,
    _weights,
    _mask_token,
    _mask_embedding,
    _layer_types,
    _block_size,
)


def _is_int(value: object) -> TypeIs[int]:
    return isinstance(value, int) and not isinstance(value, bool)


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
        names = config.get("architectures")
        return isinstance(names, list) and any(isinstance(n, str) and "DFlash" in n for n in names)

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
