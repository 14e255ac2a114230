"""EAGLE-3 rules on a head's weights: the fc's width, the draft vocabulary's d2t map,
and the norm flags the weights say the head was trained with."""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds.eagle3.head import (
    FC_WEIGHTS,
    LM_HEAD_WEIGHTS,
    WEIGHT_FLAGS,
    HeadInputs,
    WeightFlag,
    fc_width,
    is_int,
    nested_block,
    uses_aux_hidden_states,
)


def weight_findings(c: HeadInputs) -> Iterator[Finding]:
    if c.tensors is None:
        return
    yield from _fc_weight(c, c.tensors)
    draft_vocab = c.head.get("draft_vocab_size") or c.head.get("vocab_size")
    lm_head = next((c.tensors[n] for n in LM_HEAD_WEIGHTS if n in c.tensors), None)
    if lm_head is not None and is_int(draft_vocab) and lm_head["shape"][:1] != [draft_vocab]:
        yield Finding.error(
            "draft_vocab_size",
            f"lm_head.weight {lm_head['shape']} has {lm_head['shape'][:1]} rows, the config "
            f"says {draft_vocab} (draft_vocab_size, else vocab_size): the weights fail to load "
            "(llama_eagle3.py:329-334); use the weights' count",
            expected=lm_head["shape"][:1],
            actual=draft_vocab,
        )
    yield from _d2t(c, c.tensors, draft_vocab)


def norm_weight_findings(c: HeadInputs) -> Iterator[Finding]:
    """A norm flag against the weights: vLLM never reports a norm weight missing, and drops
    or refuses one whose flag is off, so either way round the head is not served as trained."""
    if c.tensors is None or not uses_aux_hidden_states(c.head):
        return
    for flag, rule in WEIGHT_FLAGS.items():
        key, value = _flag(c.head, flag, rule)
        field = c.path(key)
        held = sorted(name for name in c.tensors if rule.weight in name)
        if value and not held:
            yield Finding.error(
                field,
                f"{field} is {value!r} but the weights hold no {rule.weight}* tensor: vLLM "
                "builds the norm and never checks its weight was loaded, so it runs with its "
                "initial weight (ones; llama_eagle3.py:411-448, model_loader/default_loader.py:"
                "540-560, layers/layernorm.py:65), a norm the head was not trained with: "
                f"acceptance is lost silently; set {field} false",
                expected=False,
                actual=value,
            )
        elif held and not value:
            yield Finding.error(
                field,
                f"the weights hold {held[0]} but {field} is {value!r}: {rule.without_flag}; "
                f"set {field} true",
                expected=True,
                actual=value,
            )


def _flag(head: dict, flag: str, rule: WeightFlag) -> tuple[str, object]:
    """The key that decides a flag and its value as vLLM reads it (llama_eagle3.py:184-188,
    231): the overriding key when present, else the flag, default false."""
    if rule.overridden_by:
        parent, name = rule.overridden_by.split(".")
        block = nested_block(head, parent)
        if name in block:
            return rule.overridden_by, block[name]
    return flag, head.get(flag, False)


def _d2t(c: HeadInputs, tensors: dict[str, dict], draft_vocab: object) -> Iterator[Finding]:
    d2t = next((entry for name, entry in tensors.items() if name.split(".")[-1] == "d2t"), None)
    vocab = c.target.get("vocab_size")
    if not (is_int(draft_vocab) and is_int(vocab)):
        return
    if draft_vocab != vocab and d2t is None:
        yield Finding.error(
            "draft_vocab_size",
            f"draft_vocab_size {draft_vocab} is smaller than the vocabulary {vocab} but the "
            "weights hold no d2t table: vLLM keeps its map at zero, every draft token lands "
            "on the wrong id and acceptance collapses silently (llama_eagle3.py:338-345, "
            "376-386); add the head's d2t or use draft_vocab_size = vocab_size",
            expected="a d2t tensor",
        )
    elif draft_vocab == vocab and d2t is not None:
        yield Finding.error(
            "draft_vocab_size",
            f"the weights hold a d2t table of {d2t['shape']} but draft_vocab_size is the whole "
            "vocabulary: vLLM has no map to load it into and the weights fail to load "
            "(llama_eagle3.py:338-345, 416-420); set draft_vocab_size to the table's length",
            expected=d2t["shape"][:1],
            actual=draft_vocab,
        )
    elif d2t is not None and d2t["shape"] != [draft_vocab]:
        yield Finding.error(
            "draft_vocab_size",
            f"d2t {d2t['shape']} does not map draft_vocab_size {draft_vocab} ids: the weights "
            "fail to load",
            expected=d2t["shape"],
            actual=draft_vocab,
        )


def _fc_weight(c: HeadInputs, tensors: dict[str, dict]) -> Iterator[Finding]:
    if not uses_aux_hidden_states(c.head):
        return
    fc = next((tensors[name] for name in FC_WEIGHTS if name in tensors), None)
    if fc is None:
        yield Finding.error(
            "fc.weight",
            "no fc.weight in the head's weights: vLLM leaves the projection of the target's "
            "hidden states untrained and acceptance collapses (or a shard is missing)",
            expected="[hidden_size, n * target_hidden_size]",
        )
        return
    shape = fc["shape"]
    reads = c.head.get("target_hidden_size") or c.head.get("hidden_size")
    if len(shape) != 2 or not is_int(reads) or not reads or shape[1] % reads:
        yield Finding.error(
            "fc.weight",
            f"fc.weight has shape {shape}, not [hidden_size, n * {reads}]: the weights do not "
            "fit this config",
            expected=f"[hidden_size, n * {reads}]",
            actual=shape,
        )
        return
    width, key = fc_width(c.head)
    trained = shape[1] // reads
    if trained != width:
        yield Finding.error(
            _width_path(c, key),
            f"fc.weight {shape} takes {trained} target hidden states but vLLM sizes fc for "
            f"{width} ({key}; llama_eagle3.py:209-221, qwen3_eagle3.py:201-214): the weights "
            f"fail to load; say {trained}",
            expected=trained,
            actual=width,
        )


def _width_path(c: HeadInputs, key: str) -> str:
    if key == "the default":
        return c.path("num_aux_hidden_states")
    return c.path(key)
