"""Drafter checks on files: the offline `orch verify-config`."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import pydantic
from pydantic import ConfigDict, Field

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs, DrafterKind, detect_kind, get_kind
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


@pydantic.dataclasses.dataclass(frozen=True, config=ConfigDict(serialize_by_alias=True))
class Judged:
    """Which kind's rules a drafter was judged by, and why that kind."""

    kind: str
    variant: Annotated[str | None, Field(serialization_alias="format")]
    by: str

    def line(self) -> str:
        variant = f" ({self.variant} format)" if self.variant else ""
        return f"judged as {self.kind}{variant}: {self.by}"


def verify_local(
    drafter_path: Path | None,
    target_path: Path,
    tokenizer_path: Path | None = None,
    profile_name: str | None = None,
    num_speculative_tokens: int | None = None,
    server_version: str | None = None,
    launch: Launch | None = None,
) -> tuple[list[Finding], Judged | None]:
    """All findings for a drafter against its target, and against what vLLM
    `server_version` does with them when given, with the kind they were judged as
    (None when the drafter config could not be read); unusable input raises
    InputError. Without a drafter (or with the target as its own drafter) the
    target's MTP layers are the drafter."""
    target = read_files(target_path)
    if target.config is None:
        raise InputError(
            f"{target_path}: no usable target config.json\n"
            + "\n".join(f.message for f in target.findings)
        )
    tokenizer = read_tokenizer(tokenizer_path) if tokenizer_path else target.tokenizer_config
    own = drafter_path is None or _same(drafter_path, target_path)
    drafter = None if own or drafter_path is None else read_files(drafter_path)
    findings = [*drafter.findings] if drafter else []
    config = drafter.config if drafter else target.config
    if config is None:
        return findings, None
    kind, profile, by = _judge_as(profile_name, config, target.config, drafter is None)
    if server_version is not None:
        launch = dataclasses.replace(launch or Launch(), method=kind.method)
        findings += judge_server(server_version, launch, config, target.config)
    findings += kind.check(
        CheckInputs(
            config if kind.needs_drafter_dir else {},
            target.config,
            tokenizer=tokenizer,
            tensors=drafter.tensors if drafter else None,
            drafter_files=_file_names(drafter_path) if drafter and drafter_path else None,
            profile=profile,
            num_speculative_tokens=num_speculative_tokens,
            profile_named=bool(profile_name),
        )
    )
    return findings, Judged(kind.name, kind.variant(config), by)


def _same(drafter_path: Path, target_path: Path) -> bool:
    return drafter_path.resolve() == target_path.resolve()


def _judge_as(
    profile_name: str | None, config: dict, target: dict, no_drafter: bool
) -> tuple[DrafterKind, Profile | None, str]:
    """The kind (and profile) to judge by: the named profile's, else inferred from the files."""
    if profile_name:
        profile = get_profile(profile_name)
        return get_kind(profile.kind), profile, f"profile {profile.name}"
    if no_drafter:
        kind = get_kind("mtp")
        by = "no drafter config apart from the target's: the target's own MTP layers draft"
    else:
        kind = detect_kind(config)
        by = (
            "recognised from the drafter config"
            if kind.recognises(config)
            else "no kind recognised the drafter config; judged by the default kind"
        )
    drafter = config if kind.needs_drafter_dir else None
    return kind, detect_profile(drafter, target, kind.name), by


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
