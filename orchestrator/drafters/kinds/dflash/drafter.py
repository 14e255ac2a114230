"""A DFlash drafter as the rules read it: its constants and key table, its block size,
its published profile (`Published`), and the inputs every rule reads."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.drafters.keytable import load_key_table

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from orchestrator.drafters.profiles import Profile


DFLASH_ARCHITECTURE = "DFlashDraftModel"
DEFAULT_BLOCK_SIZE = 16
LAYER_TYPES = ("sliding_attention", "full_attention")
SLIDING = "sliding_attention"

LAYER_WEIGHT = re.compile(r"^(?:model\.)?layers\.(\d+)\.")
FC_WEIGHTS = ("fc.weight", "model.fc.weight")

IDS = "dflash_config.target_layer_ids"
MASK = "dflash_config.mask_token_id"

KEYS = load_key_table("orchestrator.drafters.kinds", "dflash_keys.json")
"""Every key of a DFlash config orch knows, and what vLLM does with it."""


def block_size(config: dict) -> int:
    """Draft block size: inside dflash_config in newer checkpoints, top level in older ones."""
    value = configured_block_size(config)
    if not is_int(value) or value < 2:
        raise ValueError(f"block_size must be an integer >= 2, got {value!r}")
    return value


def configured_block_size(config: dict) -> object:
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
class DrafterInputs:
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
        return ids if isinstance(ids, list) and all(is_int(i) for i in ids) else None


def is_int(value: object) -> TypeIs[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def names_dflash(config: dict) -> bool:
    """The config's `architectures` name a DFlash model class."""
    names = config.get("architectures")
    return isinstance(names, list) and any(isinstance(n, str) and "DFlash" in n for n in names)
