"""Drafter checks on files: the offline `orch verify-config`."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs, detect_kind, get_kind
from orchestrator.drafters.modelfiles import ModelFiles, read_config_file, read_model_dir
from orchestrator.drafters.profiles import Profile, detect_profile, get_profile
from orchestrator.errors import InputError
from orchestrator.serving.judge import Launch, judge_server

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def read_files(path: Path) -> ModelFiles:
    return read_model_dir(path) if path.is_dir() else read_config_file(path)


def read_tokenizer(path: Path) -> dict:
    file = path / "tokenizer_config.json" if path.is_dir() else path
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{file}: cannot read tokenizer config: {exc}") from None


def verify_local(
    drafter_path: Path,
    target_path: Path,
    tokenizer_path: Path | None = None,
    profile_name: str | None = None,
    num_speculative_tokens: int | None = None,
    server_version: str | None = None,
    launch: Launch | None = None,
) -> list[Finding]:
    """All findings for a drafter against its target, and against what vLLM
    `server_version` does with them when given; unusable input raises InputError."""
    drafter, target = read_files(drafter_path), read_files(target_path)
    if target.config is None:
        raise InputError(
            f"{target_path}: no usable target config.json\n"
            + "\n".join(f.message for f in target.findings)
        )
    tokenizer = read_tokenizer(tokenizer_path) if tokenizer_path else target.tokenizer_config
    findings = [*drafter.findings]
    if drafter.config is None:
        return findings
    profile: Profile | None
    if profile_name:
        profile = get_profile(profile_name)
        kind = get_kind(profile.kind)
    else:
        kind = detect_kind(drafter.config)
        profile = detect_profile(drafter.config, target.config, kind.name)
    if server_version is not None:
        launch = dataclasses.replace(launch or Launch(), method=kind.method)
        findings += judge_server(server_version, launch, drafter.config, target.config)
    return findings + kind.check(
        CheckInputs(
            drafter.config,
            target.config,
            tokenizer=tokenizer,
            tensors=drafter.tensors,
            drafter_files=_file_names(drafter_path),
            profile=profile,
            num_speculative_tokens=num_speculative_tokens,
        )
    )


def _file_names(path: Path) -> list[str] | None:
    """The names in a drafter dir (None when only a config file was given)."""
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else None


def server_launch(env: Sequence[str], attention_backend: str | None) -> Launch:
    """`--server-env NAME=VALUE` pairs and `--attention-backend` as a launch (its method is
    the drafter's kind, set by `verify_local`)."""
    pairs = {}
    for item in env:
        name, equals, value = item.partition("=")
        if not equals or not ENV_NAME.fullmatch(name):
            raise InputError(f"--server-env {item!r}: expected NAME=VALUE")
        pairs[name] = value
    return Launch(pairs, attention_backend)
