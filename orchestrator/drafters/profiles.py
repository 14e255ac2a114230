"""Built-in profiles of published drafters, kept as data files.

A profile is the whole config.json a drafter was published with, plus the
target it was published for. It is what a drafter shipped without its
config.json should get, and what a hand-written config is checked against.
The target's own config.json and tokenizer_config.json (special tokens only)
ship beside them, so a target directory can be built without downloading it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from importlib import resources

from orchestrator.drafters.modelfiles import CONFIG_FILE, TOKENIZER_CONFIG_FILE, text_config
from orchestrator.errors import InputError

TARGET_FIELDS = ("num_hidden_layers", "hidden_size", "vocab_size")
"""The target text-model fields a drafter is bound to."""

_DATA = resources.files(__package__)


@dataclass(frozen=True)
class Profile:
    """A published drafter: its name, its kind, its target, and its published config."""

    name: str
    kind: str
    target_name: str
    target: dict[str, int]
    config: dict
    notes: tuple[str, ...] = ()
    """Where the config differs from the published file, and why."""

    @property
    def num_hidden_layers(self) -> int | None:
        return self.config.get("num_hidden_layers")

    def fits(self, drafter: dict | None, target: dict) -> bool:
        """Whether a target (and a drafter, when given) look like this profile's pair."""
        dims = text_config(target)
        if any(dims.get(field) != self.target[field] for field in TARGET_FIELDS):
            return False
        return drafter is None or drafter.get("num_hidden_layers") == self.num_hidden_layers


def list_profiles() -> list[Profile]:
    """Every built-in profile, sorted by name."""
    files = (_DATA / "profiles").iterdir()
    documents = [json.loads(file.read_text()) for file in files if file.name.endswith(".json")]
    return sorted((_profile(document) for document in documents), key=lambda p: p.name)


def _profile(document: dict) -> Profile:
    target = document["target"]
    return Profile(
        name=document["name"],
        kind=document["kind"],
        target_name=target["name"],
        target={field: target[field] for field in TARGET_FIELDS},
        config=document["config"],
        notes=tuple(document.get("notes", ())),
    )


def get_profile(name: str) -> Profile:
    """The built-in profile of a published drafter by name, e.g. "z-lab/Qwen3.6-27B-DFlash"."""
    profiles = list_profiles()
    for profile in profiles:
        if profile.name == name:
            return profile
    known = ", ".join(profile.name for profile in profiles)
    raise InputError(f"unknown drafter profile {name!r}; known profiles: {known}")


def detect_profile(drafter: dict | None, target: dict, kind: str) -> Profile | None:
    """The one profile of `kind` whose target matches this target (and drafter), or None."""
    matches = [p for p in list_profiles() if p.kind == kind and p.fits(drafter, target)]
    return matches[0] if len(matches) == 1 else None


def target_files(name: str) -> dict[str, bytes]:
    """config.json and tokenizer_config.json of the target of profile `name`, as shipped."""
    stem = get_profile(name).target_name.rsplit("/", 1)[-1]
    folder = _DATA / "targets"
    return {
        file_name: (folder / f"{stem}.{file_name}").read_bytes()
        for file_name in (CONFIG_FILE, TOKENIZER_CONFIG_FILE)
    }


def merge_overrides(base: dict, overrides: dict) -> dict:
    """A new dict: `overrides` merged into `base`; dicts merge recursively, all else replaces."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_overrides(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
