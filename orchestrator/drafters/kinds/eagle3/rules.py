"""EAGLE-3 rules on a head's config: what vLLM refuses at start, keys it never reads or
overwrites, the verifier, the dimensions against the target, the steps trained; and
`check_eagle3`, every rule then every key against the format's key table."""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs
from orchestrator.drafters.kinds.eagle3.head import (
    COPIED_KEYS,
    EAGLE3,
    HEAD_CLASSES,
    LAYER_CONFIG,
    PLAIN_KEYS,
    SPECULATORS,
    SPECULATORS_HEADS,
    SPECULATORS_KEYS,
    SPECULATORS_TYPES,
    VERIFIER,
    HeadInputs,
    config_format,
    head_class,
    is_int,
    served,
    strings_of,
    trained_steps,
    verifier,
)
from orchestrator.drafters.kinds.eagle3.layers import layer_id_findings
from orchestrator.drafters.kinds.eagle3.weights import norm_weight_findings, weight_findings
from orchestrator.drafters.modelfiles import text_config


def check_eagle3(inputs: CheckInputs) -> list[Finding]:
    """Every EAGLE-3 rule, then every key of the config against the format's key table."""
    config = inputs.drafter
    found = config_format(config)
    if found is None:
        return [
            Finding.error(
                "eagle_config",
                "not an EAGLE-3 head in either format vLLM loads: a speculators config "
                "(speculators_model_type eagle3, speculators_config, transformer_layer_config) "
                "or a plain model config with an eagle_config block",
                expected="speculators_config or eagle_config",
            )
        ]
    c = HeadInputs(
        config,
        found,
        served(config),
        text_config(inputs.target),
        inputs.tensors,
        inputs.profile,
        inputs.num_speculative_tokens,
        inputs.profile_named,
    )
    rules = (
        _refused_at_start,
        _misplaced,
        _overwritten,
        _verifier,
        _dimensions,
        weight_findings,
        norm_weight_findings,
        layer_id_findings,
        _steps,
    )
    findings = [finding for rule in rules for finding in rule(c)]
    table = SPECULATORS_KEYS if found == SPECULATORS else PLAIN_KEYS
    by_key = table.unknown_findings(config, open_ended=True) + table.refused_values(config)
    if inputs.profile is not None and config_format(inputs.profile.config) == found:
        published = set(table.flatten(inputs.profile.config))
        by_key += [
            f
            for f in table.difference_findings(config, inputs.profile.config, inputs.profile.name)
            if f.field in published
        ]
    reported = {finding.field for finding in findings}
    return findings + [f for f in by_key if f.field not in reported]


def _refused_at_start(c: HeadInputs) -> Iterator[Finding]:
    if c.format == SPECULATORS:
        yield from _speculators_refusals(c)
        return
    names = strings_of(c.head.get("architectures"))
    if not names or head_class(c.head) is None:
        yield Finding.error(
            "architectures",
            f"vLLM serves this head as {names or 'no class'}, which it does not register: "
            f'it refuses to start ("Model architectures {names} are not supported for '
            'now"; transformers_utils/configs/eagle.py:55-64, models/registry.py:732-744); '
            "use the class the head was trained as, e.g. LlamaForCausalLMEagle3",
            expected=sorted(HEAD_CLASSES),
            actual=c.config.get("architectures"),
        )


def _speculators_refusals(c: HeadInputs) -> Iterator[Finding]:
    config = c.config
    model_type = config.get("model_type")
    if model_type not in (None, "speculators"):
        yield Finding.error(
            "model_type",
            f"a top-level model_type {model_type!r} makes vLLM parse the file as a plain "
            f"{model_type} config, never through the speculators converter "
            '(transformers_utils/config.py:366-372): it refuses to start ("Model '
            'architectures [...] are not supported"); remove model_type (it belongs in '
            "transformer_layer_config)",
            actual=model_type,
        )
    if not isinstance(config.get("speculators_config"), dict):
        yield Finding.error(
            "speculators_config",
            "no speculators_config: vLLM recognises the speculators format by it "
            '(transformers_utils/config.py:366-372) and refuses the file ("Unrecognized '
            'model ... Should have a `model_type` key in its config.json")',
            expected="an object",
            actual=config.get("speculators_config"),
        )
    kind = config.get("speculators_model_type")
    if kind not in SPECULATORS_TYPES:
        yield Finding.error(
            "speculators_model_type",
            f"speculators_model_type {kind!r} is not registered: vLLM refuses to start "
            f"(\"Expected one of: {list(SPECULATORS_TYPES)}. Please ensure you're loading "
            'a speculators-format model."; configs/speculators/base.py:51-56); use eagle3',
            expected=EAGLE3,
            actual=kind,
        )
    elif kind == "peagle":
        yield Finding.error(
            "speculators_model_type",
            'a P-EAGLE head: vLLM 0.34 refuses to start ("P-EAGLE (parallel drafting '
            'EAGLE-3) is not supported."; configs/speculators/algos.py:53-55); 0.32 served '
            "it as eagle3 with parallel drafting",
            expected=EAGLE3,
            actual=kind,
        )
    elif kind != EAGLE3:
        yield Finding.error(
            "speculators_model_type",
            f"a {kind} head in the speculators format, not EAGLE-3: vLLM serves it as "
            f"method {'dspark' if kind == 'dspark' else 'dflash'}; use that drafter kind",
            expected=EAGLE3,
            actual=kind,
        )
    layer = config.get(LAYER_CONFIG)
    if not isinstance(layer, dict) or not layer:
        yield Finding.error(
            LAYER_CONFIG,
            "no transformer_layer_config: vLLM builds the head's config from it "
            "(configs/speculators/base.py:58-63), so the head has no shape and cannot load "
            "its weights; use the published file",
            expected="an object",
            actual=layer,
        )
        return
    layer_type = layer.get("model_type", "llama")
    if layer_type not in SPECULATORS_HEADS:
        yield Finding.error(
            f"{LAYER_CONFIG}.model_type",
            f'vLLM refuses to start ("Unsupported model_type {layer_type} for Eagle3 '
            'speculator"; configs/speculators/algos.py:39-46): a speculators EAGLE-3 head '
            "is llama or qwen3",
            expected=sorted(SPECULATORS_HEADS),
            actual=layer_type,
        )


def _misplaced(c: HeadInputs) -> Iterator[Finding]:
    """Head keys at the top level of a speculators file, which the converter drops."""
    if c.format != SPECULATORS:
        return
    for name in c.config:
        key = SPECULATORS_KEYS.keys.get(name)
        if key is None or key.role != "dropped":
            continue
        yield Finding.warning(
            name,
            f"{name} at the top level of a speculators config is {key.effect} "
            f"(configs/speculators/algos.py:15-50): vLLM never reads it, so it changes "
            f"nothing; put it in {LAYER_CONFIG} if it is meant",
            expected=f"{LAYER_CONFIG}.{name}",
            actual=c.config[name],
        )


def _overwritten(c: HeadInputs) -> Iterator[Finding]:
    """transformer_layer_config keys the speculators converter replaces with the top-level
    key (or its default) before vLLM reads them: never read, so warnings."""
    layer = c.config.get(LAYER_CONFIG)
    if c.format != SPECULATORS or not isinstance(layer, dict):
        return
    for key in COPIED_KEYS:
        if key in layer and layer[key] != c.head.get(key):
            yield Finding.warning(
                f"{LAYER_CONFIG}.{key}",
                f"{LAYER_CONFIG}.{key} is {layer[key]!r}, but the speculators converter sets "
                f"the head's {key} from the top level (configs/speculators/algos.py:30-50): "
                f"vLLM reads {c.head.get(key)!r} from the top-level {key} (or its default) "
                "and never this one; set the top-level key if this value is meant",
                expected=c.head.get(key),
                actual=layer[key],
            )


def _verifier(c: HeadInputs) -> Iterator[Finding]:
    """The trained-for target: never read through --speculative-config, so warnings."""
    named = verifier(c.config).get("name_or_path")
    if c.profile is not None and named is not None and named != c.profile.target_name:
        yield Finding.warning(
            VERIFIER,
            f"the head says it was trained for {named!r}, not {c.profile.target_name}; vLLM "
            "never reads it through --speculative-config (only when the head dir is --model: "
            "transformers_utils/config.py:870-919), so check the head belongs to this target",
            expected=c.profile.target_name,
            actual=named,
        )


def _dimensions(c: HeadInputs) -> Iterator[Finding]:
    target_hidden, vocab = c.target.get("hidden_size"), c.target.get("vocab_size")
    reads = c.head.get("target_hidden_size") or c.head.get("hidden_size")
    if is_int(target_hidden) and reads != target_hidden:
        yield Finding.error(
            "target_hidden_size",
            f"the head reads target hidden states {reads} wide (target_hidden_size, else its "
            f"hidden_size), the target's are {target_hidden}: vLLM has no start-up check, "
            "the weights fail to load or the first forward fails (llama_eagle3.py:218-221); "
            "use a head trained for this target",
            expected=target_hidden,
            actual=reads,
        )
    head_vocab = c.head.get("vocab_size")
    if is_int(vocab) and head_vocab != vocab:
        yield Finding.error(
            c.path("vocab_size"),
            "the head's vocab_size is not the target's: draft token ids are mapped into the "
            "wrong vocabulary and the first forward fails (llama_eagle3.py:364-386); use the "
            "target's vocab_size",
            expected=vocab,
            actual=head_vocab,
        )
    draft_vocab = c.head.get("draft_vocab_size")
    if is_int(draft_vocab) and is_int(vocab) and draft_vocab > vocab:
        yield Finding.error(
            "draft_vocab_size",
            "draft_vocab_size exceeds the target's vocabulary: the d2t map points past it",
            expected=f"<= {vocab}",
            actual=draft_vocab,
        )


def _steps(c: HeadInputs) -> Iterator[Finding]:
    trained = trained_steps(c.config)
    if trained is None and c.profile is not None:
        trained = trained_steps(c.profile.config)
    wanted = c.num_speculative_tokens
    if trained is not None and wanted is not None and wanted > trained:
        yield Finding.warning(
            "num_speculative_tokens",
            f"num_speculative_tokens {wanted} exceeds the {trained} steps the head was "
            "trained for (speculators_config.proposal_methods[0].speculative_tokens): vLLM "
            "runs it anyway; later steps rarely accept",
            expected=trained,
            actual=wanted,
        )
