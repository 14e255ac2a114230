"""Drafter kinds: everything orch knows about one speculative-decoding method, behind one seam.

A kind is one module in this package that defines `KIND`, an instance of a
`DrafterKind` subclass. It says how its launch is rendered (the
`--speculative-config`), which drafter file it renders, how a drafter and a
target are checked, which config keys cat-verify re-reads, how a failed gate
is explained in its terms, and how its profiles are listed. Plan, preflight,
verify, release, the gate and the report ask the kind; none of them names one.
Adding a kind is one new module here plus its profile data: the registry finds
it by itself.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from orchestrator.errors import InputError

SpeculativeConfig = dict[str, Any]
"""vLLM's `--speculative-config` JSON: its keys are vLLM's SpeculativeConfig fields
(`vllm/config/speculative.py`), set by the kind and by the playbook's
`server.speculative_config`."""

if TYPE_CHECKING:
    from orchestrator.drafters.findings import Finding
    from orchestrator.drafters.profiles import Profile
    from orchestrator.metrics.assess import FailureCauses

DEFAULT_KIND = "dflash"
"""The kind a playbook or an offline check gets when it names none and none is recognised."""


@dataclass(frozen=True)
class CheckInputs:
    """What a kind's checks may read; everything but the two configs is optional.

    `drafter` is the drafter config as vLLM will load it (rendered or shipped;
    empty for a method without a drafter dir),
    `target` the target's whole config.json, `tokenizer` its
    tokenizer_config.json, `tensors` the drafter's merged safetensors header
    entries, `drafter_files` the names in the drafter dir, `profile` the
    published drafter it should equal; `profile_named` says the profile was asked for
    (a playbook's `drafter.profile`, `--profile`), not found by the target's shape.
    """

    drafter: dict
    target: dict
    tokenizer: dict | None = None
    tensors: dict[str, dict] | None = None
    drafter_files: Sequence[str] | None = None
    profile: Profile | None = None
    num_speculative_tokens: int | None = None
    profile_named: bool = True


class DrafterKind(ABC):
    """One speculative-decoding method as vLLM serves it."""

    name: ClassVar[str]
    """The kind's name in playbooks and profiles; also vLLM's `method` unless overridden."""
    config_template: ClassVar[str | None] = None
    """The template that renders the drafter's config.json; None: the drafter ships its own."""
    needs_drafter_dir: ClassVar[bool] = True
    """Whether the method loads a drafter directory (MTP and n-gram do not)."""
    key_fields: ClassVar[tuple[str, ...]]
    """Top-level keys of the rendered config that cat-verify re-checks after the hash."""
    failure_causes: ClassVar[FailureCauses]
    """What a failed gate points at, in this kind's fields."""

    @property
    def method(self) -> str:
        """vLLM's `--speculative-config` method."""
        return self.name

    def speculative_config(
        self, drafter_dir: str | None, num_speculative_tokens: int
    ) -> SpeculativeConfig:
        """The `--speculative-config` value of a launch."""
        config: SpeculativeConfig = {"method": self.method}
        if drafter_dir is not None:
            config["model"] = drafter_dir
        config["num_speculative_tokens"] = num_speculative_tokens
        return config

    @abstractmethod
    def recognises(self, config: dict) -> bool:
        """Whether a drafter config.json is one of this kind's."""

    def variant(self, config: dict) -> str | None:
        """Which of this kind's config formats `config` is in, for a kind with several."""
        return None

    @abstractmethod
    def check(self, inputs: CheckInputs) -> list[Finding]:
        """Every rule of this kind, findings in rule order (errors and warnings mixed)."""

    @abstractmethod
    def describe(self, profile: Profile) -> dict[str, object]:
        """The fields that tell this kind's profiles apart, for `orch profiles`."""


@cache
def _kinds() -> dict[str, DrafterKind]:
    found: dict[str, DrafterKind] = {}
    for module in pkgutil.iter_modules(__path__):
        kind = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if isinstance(kind, DrafterKind):
            found[kind.name] = kind
    return found


def kind_names() -> list[str]:
    """Every registered kind, sorted."""
    return sorted(_kinds())


def get_kind(name: str) -> DrafterKind:
    """The kind called `name`; an unknown name is bad input that lists the known ones."""
    try:
        return _kinds()[name]
    except KeyError:
        raise InputError(
            f"unknown drafter kind {name!r}; known kinds: {', '.join(kind_names())}"
        ) from None


def detect_kind(config: dict) -> DrafterKind:
    """The one kind that recognises a drafter config, else the default kind."""
    matches = [kind for kind in _kinds().values() if kind.recognises(config)]
    return matches[0] if len(matches) == 1 else get_kind(DEFAULT_KIND)
