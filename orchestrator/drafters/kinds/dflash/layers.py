"""DFlash rules on the target layers a drafter reads (`dflash_config.target_layer_ids`):
in range, increasing, spread as vLLM's default spreads them, and the ids vLLM will use."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds.dflash.drafter import IDS, DrafterInputs, is_int


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's default target layers: evenly spaced over 1..n-3, or the middle one for k == 1.

    Uses Python's round() as z-lab's code does, so halves go to the even
    neighbour: (11, 3) gives [1, 4, 8], not [1, 5, 8].
    """
    if num_draft_layers < 1:
        raise ValueError(f"num_draft_layers must be >= 1, got {num_draft_layers}")
    if num_draft_layers > max(num_target_layers, 1):
        raise ValueError(
            f"{num_draft_layers} drafter layers cannot read from {num_target_layers} target layers"
        )
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    span = end - start
    return [round(start + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def target_layer_id_findings(c: DrafterInputs) -> Iterator[Finding]:
    if not isinstance(c.drafter.get("dflash_config"), dict):
        yield Finding.error(
            "dflash_config",
            "dflash_config missing: vLLM refuses a DFlash drafter without target_layer_ids "
            "and mask_token_id; use the profile's dflash_config",
            expected=c.profile.config["dflash_config"] if c.profile else "an object",
            actual=c.drafter.get("dflash_config"),
        )
        return
    ids = c.dflash.get("target_layer_ids")
    expected = c.profile.target_layer_ids if c.profile else None
    if ids is None:
        yield Finding.error(
            IDS,
            "target_layer_ids missing: vLLM refuses the drafter; use the profile's ids",
            expected=expected,
        )
        return
    if c.layer_ids is None:
        yield Finding.error(
            IDS,
            "target_layer_ids must be a list of integer layer ids",
            expected=expected,
            actual=ids,
        )
        return
    yield from _layer_ids_shape(ids, c.target.get("num_hidden_layers"))
    if c.profile is not None:
        if ids != c.profile.target_layer_ids:
            yield Finding.error(
                IDS,
                "target_layer_ids differ from the published drafter: vLLM starts but acceptance "
                "collapses to ~1.1; use the profile's ids",
                expected=c.profile.target_layer_ids,
                actual=ids,
            )
        return
    yield from _default_spacing(ids, c.target.get("num_hidden_layers"), c.drafter)


def _layer_ids_shape(ids: list[int], num_target_layers: object) -> Iterator[Finding]:
    if any(later <= earlier for earlier, later in pairwise(ids)):
        yield Finding.error(
            IDS,
            "target_layer_ids must be strictly increasing: the drafter concatenates the "
            "target's hidden states in layer order",
            expected=sorted(set(ids)),
            actual=ids,
        )
    if is_int(num_target_layers) and any(not 0 <= i < num_target_layers for i in ids):
        yield Finding.error(
            IDS,
            f"target_layer_ids outside the target's layers 0..{num_target_layers - 1}: "
            "vLLM reads hidden states that do not exist",
            expected=f"ids in 0..{num_target_layers - 1}",
            actual=ids,
        )


def _default_spacing(ids: list[int], num_target_layers: object, drafter: dict) -> Iterator[Finding]:
    num_draft_layers = drafter.get("num_hidden_layers")
    if not (is_int(num_target_layers) and is_int(num_draft_layers)):
        return
    if not 1 <= num_draft_layers <= max(num_target_layers, 1):
        return  # no default spacing exists; the weights and shape rules report it
    default = build_target_layer_ids(num_target_layers, num_draft_layers)
    if ids != default:
        yield Finding.warning(
            IDS,
            f"target_layer_ids differ from the default spacing for {num_target_layers} target "
            f"and {num_draft_layers} drafter layers: right only if the drafter was trained "
            "with them; check its published config",
            expected=default,
            actual=ids,
        )


def effective_layer_id_findings(c: DrafterInputs) -> Iterator[Finding]:
    """eagle_aux_hidden_state_layer_ids wins over target_layer_ids (vLLM adds 1 to those)."""
    aux = c.drafter.get("eagle_aux_hidden_state_layer_ids")
    if aux is None or c.layer_ids is None:
        return
    meant = [i + 1 for i in c.layer_ids]
    if aux != meant:
        yield Finding.error(
            "eagle_aux_hidden_state_layer_ids",
            "eagle_aux_hidden_state_layer_ids wins over dflash_config.target_layer_ids and "
            f"disagrees with them: vLLM reads {aux!r}, the target_layer_ids mean {meant}; "
            "remove it",
            expected=meant,
            actual=aux,
        )
