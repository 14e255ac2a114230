"""Probe prompts: a built-in set shipped with orch, or a user's JSONL file, and the
long passages the gate composes its above-the-window prompts from."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from orchestrator.errors import InputError

BUILTIN = "builtin"
LONG_PASSAGES = "long.jsonl"


def load_prompts(spec: str) -> list[str]:
    """Prompts from `builtin` or a JSONL file of {"prompt": "..."} lines."""
    if spec == BUILTIN:
        return _parse(_package_text("builtin.jsonl"), "builtin prompts")
    try:
        text = Path(spec).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"gate.probe.prompts: cannot read {spec}: {exc.strerror}") from None
    return _parse(text, spec)


def load_passages() -> list[str]:
    """The built-in long passages (package data, the same JSONL shape)."""
    return _parse(_package_text(LONG_PASSAGES), "builtin long passages")


def _package_text(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _parse(text: str, source: str) -> list[str]:
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            prompt = json.loads(line)["prompt"]
        except (ValueError, KeyError, TypeError):
            raise InputError(f'{source}:{number}: expected a JSON object with "prompt"') from None
        if not isinstance(prompt, str) or not prompt:
            raise InputError(f"{source}:{number}: prompt must be a non-empty string")
        prompts.append(prompt)
    if not prompts:
        raise InputError(f"{source}: no prompts")
    return prompts
