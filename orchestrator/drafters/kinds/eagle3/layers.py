"""EAGLE-3 rules on the target layers a head reads: the ids in range, increasing, as
many as the head's fc expects, as trained, and where vLLM reads them."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds.eagle3.head import (
    LAYER_IDS,
    NESTED_IDS,
    PLAIN,
    SPECULATORS,
    HeadInputs,
    captured_layers,
    fc_width,
    is_int,
    nested_block,
    served,
    uses_aux_hidden_states,
)


def layer_id_findings(c: HeadInputs) -> Iterator[Finding]:
    if not uses_aux_hidden_states(c.head):
        return  # the head reads only the target's last hidden state: nothing is captured
    ids, source = captured_layers(c.head, c.layers)
    field = c.path(source) if source else LAYER_IDS
    if ids is None:
        return
    if not isinstance(ids, list) or not all(is_int(i) for i in ids):
        yield Finding.error(field, f"{field} must be a list of integer layer ids", actual=ids)
        return
    yield from _id_shape(c, ids, field)
    yield from _trained_ids(c, ids, source, field)
    yield from _count(c, ids, source, field)
    yield from _nested_ids(c, ids, source)


def _id_shape(c: HeadInputs, ids: list[int], field: str) -> Iterator[Finding]:
    layers = c.layers
    if is_int(layers) and any(not 0 <= i <= layers for i in ids):
        yield Finding.error(
            field,
            f"{field} outside 0..{layers}: the target records id k as layer k - 1's output "
            f"(models/qwen2.py:420-431), so ids past {layers} are never captured and the head "
            "gets fewer hidden states than its fc takes; vLLM fails at the first forward",
            expected=f"ids in 0..{layers}",
            actual=ids,
        )
    if len(set(ids)) != len(ids):
        yield Finding.error(
            field,
            f"{field} names a layer twice: the target captures each layer once "
            "(interfaces.py:1653-1663), so the head gets fewer hidden states than its fc "
            "takes; vLLM fails at the first forward",
            expected=sorted(set(ids)),
            actual=ids,
        )
    elif any(later < earlier for earlier, later in pairwise(ids)):
        yield Finding.warning(
            field,
            f"{field} is not in increasing order: the target captures hidden states in "
            "layer order (models/qwen2.py:420-431), so the head gets them sorted; right "
            "only if it was trained that way",
            expected=sorted(ids),
            actual=ids,
        )


def _trained_ids(
    c: HeadInputs, ids: list[int], source: str | None, field: str
) -> Iterator[Finding]:
    """The ids fed against those the head was trained on: a profile's when it was asked
    for (or the head is that profile's config), else the ones the head declares itself.
    A published head for the same target that captures others is another head: at most
    a warning that says so."""
    layers = c.layers
    trained = captured_layers(served(c.profile.config), layers)[0] if c.profile else None
    if c.profile is not None and trained is not None and ids != trained:
        if c.trained_as_profile:
            yield Finding.error(
                field,
                f"vLLM feeds the head target layers {ids}, but {c.profile.name} was trained "
                f"on {trained}: it starts and acceptance collapses; use the published ids",
                expected=trained,
                actual=ids,
            )
            return
        if source is not None:
            yield Finding.warning(
                field,
                f"the head declares {ids} ({field}), the layers it was trained on, and vLLM "
                f"feeds it those; {c.profile.name}, published for the same target "
                f"({c.profile.target_name}), captures {trained}: no profile was asked for, "
                "so this head is judged as another one (drafter.profile names a published "
                "head to be judged by)",
                actual=ids,
            )
            return
    if c.trained_as_profile or source is not None or not is_int(layers):
        return
    yield Finding.warning(
        LAYER_IDS,
        f"{LAYER_IDS} is not set: vLLM captures the target's default layers {ids} "
        "(eagle3_utils.py:103-139, interfaces.py:1764-1785); right only if the head was "
        "trained on them",
        expected=ids,
    )


def _count(c: HeadInputs, ids: list[int], source: str | None, field: str) -> Iterator[Finding]:
    width, key = fc_width(c.head)
    if len(ids) == width:
        return
    where = f"from {source}" if source else "the target's defaults"
    hint = ""
    if c.format == SPECULATORS and key == "the default" and source == LAYER_IDS:
        hint = (
            "; a llama head takes its width from transformer_layer_config."
            "num_aux_hidden_states, not from the top-level ids: set it"
        )
    yield Finding.error(
        field,
        f"vLLM feeds the head {len(ids)} target hidden states ({ids}, {where}) but its fc "
        f"takes {width} ({key}; llama_eagle3.py:209-221, qwen3_eagle3.py:201-214): no "
        f"start-up check, the first forward fails{hint}",
        expected=width,
        actual=len(ids),
    )


def _nested_ids(c: HeadInputs, ids: list[int], source: str | None) -> Iterator[Finding]:
    """eagle_config's id list, which vLLM reads for its length only: in the plain format
    it is where EAGLE-3 training records the layers, so feeding others is an error; a
    speculators head records them at the top level, so a different list in its layer
    config's eagle_config may be stale: a warning."""
    nested = nested_block(c.head, "eagle_config").get("eagle_aux_hidden_state_layer_ids")
    if not isinstance(nested, list) or not nested or nested == ids:
        return
    field = c.path(NESTED_IDS)
    chosen = f"{c.path(source)}" if source else "nothing: it captures the target's defaults"
    message = (
        f"{field} is {nested} but vLLM never reads it to choose layers, only its length "
        f"(llama_eagle3.py:213-216); the layers come from {chosen} (eagle3_utils.py:103-139), "
        f"so the head is fed {ids}"
    )
    if c.format == PLAIN:
        yield Finding.error(
            field,
            f"{message}, silently, and acceptance collapses; copy the list to the top-level "
            f"{LAYER_IDS}",
            expected=nested,
            actual=ids,
        )
        return
    yield Finding.warning(
        field,
        f"{message}; vLLM reads the top-level {LAYER_IDS} instead (copied into the head by "
        "configs/speculators/algos.py:47-50): set it there if these are the layers the head "
        "was trained on",
        expected=nested,
        actual=ids,
    )
