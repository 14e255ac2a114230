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


@dataclass(frozen=True)
class Step:
    """One fact from `since` on: its value, the error text vLLM gives, where it was read."""

    value: Any
    error: str | None = None
    warning: str | None = None
    source: str = ""
    quote: str | None = None
    """The first cited line as the wheel has it (stripped), read back by a test."""


@dataclass(frozen=True)
class _Facts:
    """`vllm_releases.yaml` read: the releases in order, the default one, and each fact
    as its steps, each with the release it holds from."""

    releases: list[str]
    default: str
    steps: dict[str, list[tuple[str, Step]]]


@cache
def _facts() -> _Facts:
    data = yaml.load(DATA.read_text(), Loader=LOADER)
    releases, default = data.pop("releases"), data.pop("default")
    data.pop("shared")  # facts every release shares: read by people, not stepped
    return _Facts(
        list(releases),
        str(default),
        {
            name: [
                (
                    s["since"],
                    Step(s["value"], s.get("error"), s.get("warning"), s["source"], s.get("quote")),
                )
                for s in steps
            ]
            for name, steps in data.items()
        },
    )


def known_releases() -> list[str]:
    return list(_facts().releases)


def default_release() -> str:
    return _facts().default


@dataclass(frozen=True)
class Release:
    """The facts of one release, each the step in force at it."""

    version: str

    def fact(self, name: str) -> Step:
        releases = known_releases()
        index = releases.index(self.version)
        steps = [step for since, step in _facts().steps[name] if releases.index(since) <= index]
        return steps[-1]

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
