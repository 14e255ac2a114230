"""What one engine step costs the lab's stand-in, by the tokens it verifies and drafts.

Requests in flight share engine steps. A step of a server without speculation
decodes one token for each of its `streams`; with speculation it verifies k + 1
tokens for each stream and first drafts k positions for each. In units of one
single-stream step of the target alone (1 / `--tokens-per-second`):

    target(tokens)  = (1 - token_share) + token_share * tokens
    drafter(streams) = position * ((1 - drafter token_share) + drafter token_share * streams)
    step            = target(streams * (k + 1)) + k * drafter(streams)

`token_share` is the part of a step that grows with the tokens in it (the rest is
paid once per step: reading the weights, launching the kernels, scheduling).
Without speculation at one stream a step is exactly one unit, so
`--tokens-per-second` keeps its meaning there. Each named profile in
`speed_costs.yaml` (beside this file) states its parameters and where they come from.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import InputError
from orchestrator.lab.releases import LOADER

DATA = Path(__file__).with_name("speed_costs.yaml")
PROFILE_ENV = "ORCH_LAB_STEP_COSTS"


@dataclass(frozen=True)
class StepCosts:
    """One profile: the target's growing share, a drafted position's cost and its share."""

    token_share: float
    draft_position: float
    draft_token_share: float

    def units(self, streams: int, k: int) -> float:
        """A step's time in single-stream steps of the target alone (k = 0: no drafter)."""
        verified = streams * (k + 1)
        step = (1 - self.token_share) + self.token_share * verified
        if k:
            share = self.draft_token_share
            step += k * self.draft_position * ((1 - share) + share * streams)
        return step

    def speedup(self, streams: int, k: int, acceptance_length: float) -> float:
        """Output tokens/s with the drafter over without, at `streams` streams: each step
        yields `acceptance_length` tokens a stream instead of one."""
        return acceptance_length * self.units(streams, 0) / self.units(streams, k)


def _share(profile: str, data: dict[str, Any], field: str) -> float:
    entry = data.get(field)
    value = entry.get("value") if isinstance(entry, dict) else None
    where = f"{DATA}: profiles.{profile}.{field}"
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise InputError(f"{where}.value: a number >= 0 is required, got {value!r}")
    if not (isinstance(entry, dict) and entry.get("source")):
        raise InputError(f"{where}.source: every parameter states where it comes from")
    return float(value)


@cache
def _data() -> dict[str, Any]:
    try:
        data = yaml.load(DATA.read_text(), Loader=LOADER)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise InputError(f"{DATA}{line}: not YAML: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        raise InputError(f"{DATA}: a mapping with `default` and `profiles` is required")
    return data


@cache
def profiles() -> dict[str, StepCosts]:
    """Every profile of `speed_costs.yaml`, checked: each parameter a number with a source."""
    data = _data()
    found = {}
    for name, entry in data["profiles"].items():
        token_share = _share(name, entry, "token_share")
        if token_share > 1:
            raise InputError(f"{DATA}: profiles.{name}.token_share.value: at most 1")
        found[name] = StepCosts(
            token_share,
            _share(name, entry, "draft_position"),
            _share(name, entry, "draft_token_share"),
        )
    return found


def default_profile() -> str:
    return str(_data()["default"])


def profile(name: str) -> StepCosts:
    """A named profile, or an error listing the known ones."""
    known = profiles()
    if name not in known:
        raise InputError(f"step costs: no profile {name!r} in {DATA} (known: {', '.join(known)})")
    return known[name]
