"""What the vLLM release the stand-in claims does, from the lab's own source-cited data.

`vllm_releases.yaml` (beside this file) holds each fact as steps over the releases read
from their wheels, each step citing file:line. The stand-in reads nothing of orch's own
capability table, drafter key table or profiles: where orch's table is wrong, preflight
and the lab disagree instead of agreeing by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).with_name("vllm_releases.yaml")


class UnknownRelease(ValueError):
    """A version the lab has no facts for."""


LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it: every stand-in start reads the file."""


@cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.load(DATA.read_text(), Loader=LOADER)
    return data


def known_releases() -> list[str]:
    return list(_data()["releases"])


def default_release() -> str:
    return str(_data()["default"])


@dataclass(frozen=True)
class Step:
    """One fact from `since` on: its value, the error text vLLM gives, where it was read."""

    value: Any
    error: str | None = None
    warning: str | None = None
    source: str = ""


@dataclass(frozen=True)
class Release:
    """The facts of one release, each the step in force at it."""

    version: str

    def fact(self, name: str) -> Step:
        releases = known_releases()
        index = releases.index(self.version)
        steps = [s for s in _data()[name] if releases.index(s["since"]) <= index]
        step = steps[-1]
        return Step(step["value"], step.get("error"), step.get("warning"), step["source"])

    @property
    def methods(self) -> list[str]:
        return list(self.fact("methods").value)

    @property
    def per_request_spec_decode_metrics(self) -> bool:
        return bool(self.fact("per_request_spec_decode_metrics").value)

    @property
    def system_fingerprint(self) -> bool:
        """Whether a finished response carries a fingerprint string (else null)."""
        return bool(self.fact("system_fingerprint").value)


def release(version: str) -> Release:
    """The release as the lab knows it; an unknown version names the known ones."""
    if version not in known_releases():
        known = ", ".join(known_releases())
        raise UnknownRelease(f"the lab's vLLM knows releases {known}; not {version!r}")
    return Release(version)
