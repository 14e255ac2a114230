"""EAGLE-3 heads, in both formats vLLM loads, judged by what vLLM reads from them.

A speculators-format head (`speculators_model_type`, `speculators_config`,
`transformer_layer_config`) goes through vLLM's speculators converter, which
builds the head's config from `transformer_layer_config` plus a few top-level
keys; a plain-format head is a transformers model config with an `eagle_config`
block, kept whole. Either way vLLM checks almost nothing at start: a wrong
width, vocabulary or layer id fails at weight load or at the first forward, or
silently costs acceptance. These rules read the config as vLLM will hold it
(`served`), then judge every key by the table `eagle3_keys.json` (file:line in
vLLM 0.34.0 for each fact).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.keytable import KeyTable, key_table, read_key_document
from orchestrator.drafters.kinds import CheckInputs, DrafterKind
from orchestrator.drafters.modelfiles import text_config
from orchestrator.metrics.assess import FailureCauses

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from orchestrator.drafters.profiles import Profile

SPECULATORS = "speculators"
PLAIN = "plain"
EAGLE3 = "eagle3"
LAYER_IDS = "eagle_aux_hidden_state_layer_ids"
NESTED_IDS = "eagle_config.eagle_aux_hidden_state_layer_ids"
LAYER_CONFIG = "transformer_layer_config"
VERIFIER = "speculators_config.verifier.name_or_path"
DEFAULT_WIDTH = 3
"""Hidden states a head's fc takes when nothing says otherwise (llama_eagle3.py:216)."""

SPECULATORS_TYPES = ("eagle3", "peagle", "dflash", "dflash2", "dspark")
"""speculators_model_type values vLLM 0.34.0 registers (speculators/algos.py:15-188)."""
SPECULATORS_HEADS = {"llama": "Eagle3LlamaForCausalLM", "qwen3": "Eagle3Qwen3ForCausalLM"}
"""transformer_layer_config.model_type -> head class (speculators/algos.py:39-46)."""
HEAD_CLASSES = {
    "Eagle3LlamaForCausalLM": "llama",
    "Eagle3MiniMaxM2ForCausalLM": "llama",
    "LlamaForCausalLMEagle3": "llama",
    "Eagle3Qwen2_5vlForCausalLM": "llama",
    "Eagle3Qwen3vlForCausalLM": "llama",
    "Eagle3Qwen3ForCausalLM": "qwen3",
    "Eagle3DeepseekV2ForCausalLM": "llama",
    "Eagle3DeepseekV3ForCausalLM": "llama",
}
"""The EAGLE-3 head classes vLLM 0.34.0 registers (registry.py:732-744), by how each sizes
its fc: like llama_eagle3.py or like qwen3_eagle3.py (deepseek_eagle3.py sizes it as llama)."""
COPIED_KEYS = (
    "draft_vocab_size",
    "target_hidden_size",
    "norm_before_residual",
    "norm_before_fc",
    "fc_norm",
    "norm_output",
    LAYER_IDS,
)
"""Top-level keys the speculators converter copies into the head's config (algos.py:30-50)."""

_FC_WEIGHTS = ("fc.weight", "model.fc.weight")
_LM_HEAD_WEIGHTS = ("lm_head.weight", "model.lm_head.weight")


_DOCUMENT = read_key_document(__package__, "eagle3_keys.json")


def _tables() -> tuple[KeyTable, KeyTable]:
    sources = _DOCUMENT["sources"]
    model = _DOCUMENT["model_keys"]
    nested = {f"{LAYER_CONFIG}.{path}": entry for path, entry in model.items()}
    speculators = key_table({**nested, **_DOCUMENT["speculators_keys"]}, sources)
    return speculators, key_table(model, sources)


SPECULATORS_KEYS, PLAIN_KEYS = _tables()
"""Every key of an EAGLE-3 config orch knows, per format, and what vLLM does with it."""


@dataclass(frozen=True)
class WeightFlag:
    """A norm flag that adds a weight to the head: the weights say how it was trained."""

    weight: str
    """The weight's name prefix: `input_norm.` is matched by name (llama_eagle3.py:442-443),
    `fc_norm.` is a module that exists only with its flag (llama_eagle3.py:231-240)."""
    overridden_by: str | None
    """A key of the served head that wins over the flag when present."""
    without_flag: str
    """What vLLM does with the weight when the flag is off."""


WEIGHT_FLAGS = {flag: WeightFlag(**rule) for flag, rule in _DOCUMENT["weight_flags"].items()}
"""Flags judged by the weights, with no published config needed."""
CAPTURE_ORDER = tuple((entry["key"], entry["shift"]) for entry in _DOCUMENT["capture_order"])
"""(key of the served head, what vLLM adds to each id): the first set one names the layers
captured (eagle3_utils.py:103-139)."""


def config_format(config: dict) -> str | None:
    """speculators, plain, or None when the config is no EAGLE-3 head of either format."""
    if "speculators_config" in config or "speculators_model_type" in config:
        return SPECULATORS
    names = config.get("architectures")
    names = names if isinstance(names, list) else []
    if any(isinstance(n, str) and "DFlash" in n for n in names):
        return None
    eagle3_named = any(isinstance(n, str) and "Eagle3" in n for n in names)
    return PLAIN if isinstance(config.get("eagle_config"), dict) or eagle3_named else None


def served(config: dict) -> dict:
    """The head's config as vLLM holds it: the speculators converter's output
    (speculators/algos.py:15-50), or the plain config with its class renamed as
    EAGLEConfig does (configs/eagle.py:55-64)."""
    if config_format(config) != SPECULATORS:
        names = config.get("architectures")
        return {**config, "architectures": [_eagle3_class(n) for n in _strings(names)]}
    layer = config.get(LAYER_CONFIG)
    head = dict(layer) if isinstance(layer, dict) else {}
    head["draft_vocab_size"] = config.get("draft_vocab_size")
    if config.get("target_hidden_size") is not None:
        head["target_hidden_size"] = config["target_hidden_size"]
    head["norm_before_residual"] = config.get("norm_before_residual", True)
    for flag in ("norm_before_fc", "fc_norm", "norm_output"):
        head[flag] = config.get(flag, False)
    model_type = head.get("model_type", "llama")
    head["architectures"] = [SPECULATORS_HEADS.get(model_type, f"unsupported {model_type}")]
    if config.get(LAYER_IDS):
        head[LAYER_IDS] = config[LAYER_IDS]
    return head


def _eagle3_class(name: str) -> str:
    return name if name.startswith("Eagle3") or name.endswith("Eagle3") else f"Eagle3{name}"


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _nested(head: dict, name: str) -> dict:
    value = head.get(name)
    return value if isinstance(value, dict) else {}


def uses_aux_hidden_states(head: dict) -> bool:
    """eagle_config.use_aux_hidden_state, default true (spec_decode/eagle/config.py:68-72)."""
    return _nested(head, "eagle_config").get("use_aux_hidden_state", True) is not False


def head_class(head: dict) -> str | None:
    """llama or qwen3: which model file builds the head, or None for a class vLLM lacks."""
    names = _strings(head.get("architectures"))
    return HEAD_CLASSES.get(names[0]) if names else None


def fc_width(head: dict) -> tuple[int, str]:
    """How many target hidden states the head's fc takes, and the key that says so
    (llama_eagle3.py:209-216; qwen3_eagle3.py:201-209)."""
    nested = _nested(head, "eagle_config").get("eagle_aux_hidden_state_layer_ids")
    if head_class(head) == "qwen3":
        candidates = [
            ("num_aux_layers", head.get("num_aux_layers")),
            ("num_aux_hidden_states", head.get("num_aux_hidden_states")),
            (LAYER_IDS, _length(head.get(LAYER_IDS))),
            (NESTED_IDS, _length(nested)),
        ]
    else:
        candidates = [
            ("num_aux_hidden_states", head.get("num_aux_hidden_states")),
            (NESTED_IDS, _length(nested)),
        ]
    for key, value in candidates:
        if _is_int(value) and value:
            return value, key
    return DEFAULT_WIDTH, "the default"


def _length(value: object) -> int | None:
    return len(value) if isinstance(value, list) and value else None


def captured_layers(head: dict, num_target_layers: object) -> tuple[object, str | None]:
    """The target layer ids vLLM captures and the key they come from; None as the key
    means the target's defaults (eagle3_utils.py:24-30,103-139, interfaces.py:1764-1785)."""
    for key, shift in CAPTURE_ORDER:
        *parent, name = key.split(".")
        ids = (_nested(head, parent[0]) if parent else head).get(name)
        if not ids:
            continue
        if shift and isinstance(ids, list) and all(_is_int(i) for i in ids):
            return [i + shift for i in ids], key
        return ids, key
    if _is_int(num_target_layers):
        return default_layers(num_target_layers), None
    return None, None


def default_layers(num_target_layers: int) -> list[int]:
    """The target's own choice when the head names none: (2, n // 2, n - 3)."""
    return [2, num_target_layers // 2, num_target_layers - 3]


def trained_steps(config: dict) -> int | None:
    """The speculative tokens of the first proposal method: what the head was trained for."""
    methods = _nested(config, "speculators_config").get("proposal_methods")
    if isinstance(methods, list) and methods and isinstance(methods[0], dict):
        steps = methods[0].get("speculative_tokens")
        return steps if _is_int(steps) else None
    return None


def verifier(config: dict) -> dict:
    return _nested(_nested(config, "speculators_config"), "verifier")


@dataclass(frozen=True)
class _Inputs:
    config: dict
    format: str
    head: dict
    target: dict  # the target's text-model fields
    tensors: dict[str, dict] | None
    profile: Profile | None
    num_speculative_tokens: int | None

    def path(self, key: str) -> str:
        """Where a key of the served config is written in the file: a speculators head's
        copied keys at the top level (the ids only when set there: algos.py:47-50)."""
        if self.format != SPECULATORS or (key in COPIED_KEYS and key != LAYER_IDS):
            return key
        return key if key == LAYER_IDS and self.config.get(key) else f"{LAYER_CONFIG}.{key}"

    @property
    def layers(self) -> object:
        return self.target.get("num_hidden_layers")


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
    c = _Inputs(
        config,
        found,
        served(config),
        text_config(inputs.target),
        inputs.tensors,
        inputs.profile,
        inputs.num_speculative_tokens,
    )
    rules = (
        _refused_at_start,
        _misplaced,
        _overwritten,
        _verifier,
        _dimensions,
        _weights,
        _norm_weights,
        _layer_ids,
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


def _refused_at_start(c: _Inputs) -> Iterator[Finding]:
    if c.format == SPECULATORS:
        yield from _speculators_refusals(c)
        return
    names = _strings(c.head.get("architectures"))
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


def _speculators_refusals(c: _Inputs) -> Iterator[Finding]:
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


def _misplaced(c: _Inputs) -> Iterator[Finding]:
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


def _overwritten(c: _Inputs) -> Iterator[Finding]:
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


def _verifier(c: _Inputs) -> Iterator[Finding]:
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


def _dimensions(c: _Inputs) -> Iterator[Finding]:
    target_hidden, vocab = c.target.get("hidden_size"), c.target.get("vocab_size")
    reads = c.head.get("target_hidden_size") or c.head.get("hidden_size")
    if _is_int(target_hidden) and reads != target_hidden:
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
    if _is_int(vocab) and head_vocab != vocab:
        yield Finding.error(
            c.path("vocab_size"),
            "the head's vocab_size is not the target's: draft token ids are mapped into the "
            "wrong vocabulary and the first forward fails (llama_eagle3.py:364-386); use the "
            "target's vocab_size",
            expected=vocab,
            actual=head_vocab,
        )
    draft_vocab = c.head.get("draft_vocab_size")
    if _is_int(draft_vocab) and _is_int(vocab) and draft_vocab > vocab:
        yield Finding.error(
            "draft_vocab_size",
            "draft_vocab_size exceeds the target's vocabulary: the d2t map points past it",
            expected=f"<= {vocab}",
            actual=draft_vocab,
        )


def _weights(c: _Inputs) -> Iterator[Finding]:
    if c.tensors is None:
        return
    yield from _fc_weight(c, c.tensors)
    draft_vocab = c.head.get("draft_vocab_size") or c.head.get("vocab_size")
    lm_head = next((c.tensors[n] for n in _LM_HEAD_WEIGHTS if n in c.tensors), None)
    if lm_head is not None and _is_int(draft_vocab) and lm_head["shape"][:1] != [draft_vocab]:
        yield Finding.error(
            "draft_vocab_size",
            f"lm_head.weight {lm_head['shape']} has {lm_head['shape'][:1]} rows, the config "
            f"says {draft_vocab} (draft_vocab_size, else vocab_size): the weights fail to load "
            "(llama_eagle3.py:329-334); use the weights' count",
            expected=lm_head["shape"][:1],
            actual=draft_vocab,
        )
    yield from _d2t(c, c.tensors, draft_vocab)


def _norm_weights(c: _Inputs) -> Iterator[Finding]:
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
        block = _nested(head, parent)
        if name in block:
            return rule.overridden_by, block[name]
    return flag, head.get(flag, False)


def _d2t(c: _Inputs, tensors: dict[str, dict], draft_vocab: object) -> Iterator[Finding]:
    d2t = next((entry for name, entry in tensors.items() if name.split(".")[-1] == "d2t"), None)
    vocab = c.target.get("vocab_size")
    if not (_is_int(draft_vocab) and _is_int(vocab)):
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


def _fc_weight(c: _Inputs, tensors: dict[str, dict]) -> Iterator[Finding]:
    if not uses_aux_hidden_states(c.head):
        return
    fc = next((tensors[name] for name in _FC_WEIGHTS if name in tensors), None)
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
    if len(shape) != 2 or not _is_int(reads) or not reads or shape[1] % reads:
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


def _width_path(c: _Inputs, key: str) -> str:
    if key == "the default":
        return c.path("num_aux_hidden_states")
    return c.path(key)


def _layer_ids(c: _Inputs) -> Iterator[Finding]:
    if not uses_aux_hidden_states(c.head):
        return  # the head reads only the target's last hidden state: nothing is captured
    ids, source = captured_layers(c.head, c.layers)
    field = c.path(source) if source else LAYER_IDS
    if ids is None:
        return
    if not isinstance(ids, list) or not all(_is_int(i) for i in ids):
        yield Finding.error(field, f"{field} must be a list of integer layer ids", actual=ids)
        return
    yield from _id_shape(c, ids, field)
    yield from _trained_ids(c, ids, source, field)
    yield from _count(c, ids, source, field)
    yield from _nested_ids(c, ids, source)


def _id_shape(c: _Inputs, ids: list[int], field: str) -> Iterator[Finding]:
    layers = c.layers
    if _is_int(layers) and any(not 0 <= i <= layers for i in ids):
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


def _trained_ids(c: _Inputs, ids: list[int], source: str | None, field: str) -> Iterator[Finding]:
    layers = c.layers
    if c.profile is not None:
        trained, _ = captured_layers(served(c.profile.config), layers)
        if trained is not None and ids != trained:
            yield Finding.error(
                field,
                f"vLLM feeds the head target layers {ids}, but {c.profile.name} was trained on "
                f"{trained}: it starts and acceptance collapses; use the published ids",
                expected=trained,
                actual=ids,
            )
    elif source is None and _is_int(layers):
        yield Finding.warning(
            LAYER_IDS,
            f"{LAYER_IDS} is not set: vLLM captures the target's default layers {ids} "
            "(eagle3_utils.py:103-139, interfaces.py:1764-1785); right only if the head was "
            "trained on them",
            expected=ids,
        )


def _count(c: _Inputs, ids: list[int], source: str | None, field: str) -> Iterator[Finding]:
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


def _nested_ids(c: _Inputs, ids: list[int], source: str | None) -> Iterator[Finding]:
    """eagle_config's id list, which vLLM reads for its length only: in the plain format
    it is where EAGLE-3 training records the layers, so feeding others is an error; a
    speculators head records them at the top level, so a different list in its layer
    config's eagle_config may be stale: a warning."""
    nested = _nested(c.head, "eagle_config").get("eagle_aux_hidden_state_layer_ids")
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


def _steps(c: _Inputs) -> Iterator[Finding]:
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


def _is_int(value: object) -> TypeIs[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class Eagle3(DrafterKind):
    """EAGLE-3 heads: speculators format (vllm-project/speculators) or plain (eagle_config)."""

    name = EAGLE3
    key_fields = (
        "speculators_model_type",
        "speculators_config",
        LAYER_CONFIG,
        "eagle_config",
        LAYER_IDS,
        "draft_vocab_size",
        "target_hidden_size",
    )
    failure_causes = FailureCauses(
        misaligned=f"{LAYER_IDS} (the target layers fed to the head; "
        f"{NESTED_IDS} only sets their count) and the target the head was trained for",
        shallow="num_speculative_tokens against the steps the head was trained for "
        "(speculators_config.proposal_methods[0].speculative_tokens)",
    )

    def recognises(self, config: dict) -> bool:
        found = config_format(config)
        if found == SPECULATORS:
            return config.get("speculators_model_type") in (None, EAGLE3, "peagle")
        return found == PLAIN

    def variant(self, config: dict) -> str | None:
        return config_format(config)

    def check(self, inputs: CheckInputs) -> list[Finding]:
        return check_eagle3(inputs)

    def describe(self, profile: Profile) -> dict[str, object]:
        return {
            "format": config_format(profile.config),
            "verifier": verifier(profile.config).get("name_or_path"),
            "speculative_tokens": trained_steps(profile.config),
        }


KIND = Eagle3()
