"""MTP: the target's own multi-token-prediction layers draft for it; no drafter dir.

vLLM's `--speculative-config '{"method": "mtp", ...}'` loads the draft from the
target's checkpoint and rewrites the target's config into an MTP model by its
model type (`SpeculativeConfig.hf_config_override`); the number of MTP layers
comes from a model-type specific key. What vLLM reads, and what it refuses or
only warns about, is the table `mtp_keys.json` (file:line in vLLM 0.34.0).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.keytable import key_table, read_key_document
from orchestrator.drafters.kinds import CheckInputs, DrafterKind
from orchestrator.drafters.modelfiles import CONFIG_FILE, text_config
from orchestrator.drafters.profiles import Profile, target_files
from orchestrator.metrics.assess import FailureCauses


@dataclass(frozen=True)
class Family:
    """Target model types vLLM turns into an MTP draft, and where their layer count is."""

    key: str
    source: str
    unset_builds: int | None
    """MTP layers vLLM builds when the key is unset (None: not known to build any)."""
    unset_checked: bool = False
    """Whether, unset, num_speculative_tokens is still checked against that count (the
    config class defaults it, so vLLM's n_predict has it)."""


_DOCUMENT = read_key_document(__package__, "mtp_keys.json")
KEYS = key_table(_DOCUMENT["keys"], _DOCUMENT["sources"])
"""The target keys vLLM's mtp method reads."""
FAMILIES = {name: Family(**entry) for name, entry in _DOCUMENT["families"].items()}
"""Target model_type -> its MTP layer key (config/speculative.py, hf_config_override)."""


def mtp_layers(target: dict) -> tuple[str | None, object]:
    """The target's model type and its declared MTP layer count (top level, then
    text_config, as hf_config_override reads it), or None when unset."""
    model_type = target.get("model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        return model_type, None
    return model_type, target.get(family.key, text_config(target).get(family.key))


def is_mtp_target(config: dict) -> bool:
    """Whether a config.json is a target with MTP layers (not a drafter's config): its
    layer count set above 0, or unset in a family for which vLLM then builds some (the
    published Qwen3.6-27B config has no `mtp_num_hidden_layers`: one layer)."""
    model_type, layers = mtp_layers(config)
    if layers is None:
        family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
        return family is not None and bool(family.unset_builds)
    return isinstance(layers, int) and not isinstance(layers, bool) and layers > 0


class Mtp(DrafterKind):
    """The target's MTP layers draft for it."""

    name = "mtp"
    needs_drafter_dir = False
    key_fields = ()
    failure_causes = FailureCauses(
        misaligned="that the target's checkpoint holds trained MTP weights (mtp.* tensors)",
        shallow="num_speculative_tokens against the target's MTP layer count: vLLM reruns "
        "the same MTP layer for every further step",
    )

    def recognises(self, config: dict) -> bool:
        return is_mtp_target(config)

    def check(self, inputs: CheckInputs) -> list[Finding]:
        return [*_layers(inputs), *_misspelt(inputs.target)]

    def describe(self, profile: Profile) -> dict[str, object]:
        target = json.loads(target_files(profile.name)[CONFIG_FILE])
        return {"mtp_layers": mtp_layers(target)[1]}


def _layers(c: CheckInputs) -> Iterator[Finding]:
    model_type, layers = mtp_layers(c.target)
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        yield Finding.error(
            "drafter.kind",
            f"vLLM has no MTP conversion for model_type {model_type!r}: 0.34 accepts method "
            "mtp and loads the WHOLE target again as the draft (mtp/config.py:42-55, "
            "speculator_config.py:404-426): twice the weights, no speed-up; 0.32 refuses it "
            "(\"Unsupported speculative method: 'mtp'\"); use another drafter kind",
            expected=sorted(FAMILIES),
            actual=model_type,
        )
        return
    source = KEYS.sources[family.source]
    wanted = c.num_speculative_tokens
    if layers is None:
        built = family.unset_builds
        what = f"vLLM builds {built} MTP layer" if built else "vLLM does not know how many"
        against = f"against {built}" if family.unset_checked else "against nothing"
        yield Finding.warning(
            family.key,
            f"{family.key} is not set: {what} ({source}) and checks num_speculative_tokens "
            f"{against}; make sure the checkpoint holds the MTP layers' weights and set "
            "the count it has",
            expected="the checkpoint's MTP layer count",
        )
        if built is None:
            return
        layers = built
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 0:
        yield Finding.error(
            family.key,
            f"{family.key} must be a count of MTP layers",
            expected="an integer >= 1",
            actual=layers,
        )
        return
    if layers == 0:
        yield Finding.error(
            family.key,
            f"{family.key} is 0: the target has no MTP layers and vLLM refuses to start "
            "(ZeroDivisionError: integer modulo by zero, speculator_config.py:283-291); use "
            "another drafter kind",
            expected=">= 1",
            actual=layers,
        )
        return
    if wanted is None or wanted <= layers:
        return
    if wanted % layers:
        yield Finding.error(
            "num_speculative_tokens",
            f'vLLM refuses to start: "num_speculative_tokens:{wanted} must be divisible by '
            f"n_predict={layers}\" (speculator_config.py:283-291): above the target's "
            f"{layers} MTP layer(s) it must be a multiple; use {layers} or "
            f"{wanted - wanted % layers}",
            expected=layers,
            actual=wanted,
        )
    else:
        yield Finding.warning(
            "num_speculative_tokens",
            f"num_speculative_tokens {wanted} exceeds the target's {layers} MTP layer(s): vLLM "
            'only warns ("will run multiple times of forward on same MTP layer", '
            "mtp/config.py:89-98) and later steps rarely accept",
            expected=layers,
            actual=wanted,
        )


def _misspelt(target: dict) -> Iterator[Finding]:
    """MTP-looking keys vLLM never reads: a misspelt layer count is as good as unset."""
    _, layers = mtp_layers(target)
    for path in KEYS.flatten(target):
        if path in KEYS.keys or not ("mtp" in path or "nextn" in path):
            continue
        near = KEYS.suggestion(path)
        found = Finding.error if near and layers is None else Finding.warning
        yield found(
            path,
            f"{path} is read by no vLLM MTP code"
            + (f"; did you mean {near}?" if near else "")
            + (" (unset, so what was meant is not set)" if near and layers is None else ""),
            expected=near,
            actual=KEYS.flatten(target)[path],
        )


KIND = Mtp()
