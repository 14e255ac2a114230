"""An EAGLE-3 head as vLLM holds it: its two formats, the config vLLM serves from it
(`served`), the key tables, and the facts read off it (head class, fc width, layers
captured, steps trained, verifier), with the inputs every rule reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.drafters.keytable import KeyTable, key_table, read_key_document

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

FC_WEIGHTS = ("fc.weight", "model.fc.weight")
LM_HEAD_WEIGHTS = ("lm_head.weight", "model.lm_head.weight")


_DOCUMENT = read_key_document("orchestrator.drafters.kinds", "eagle3_keys.json")


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
        return {**config, "architectures": [_eagle3_class(n) for n in strings_of(names)]}
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


def strings_of(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def nested_block(head: dict, name: str) -> dict:
    value = head.get(name)
    return value if isinstance(value, dict) else {}


def uses_aux_hidden_states(head: dict) -> bool:
    """eagle_config.use_aux_hidden_state, default true (spec_decode/eagle/config.py:68-72)."""
    return nested_block(head, "eagle_config").get("use_aux_hidden_state", True) is not False


def head_class(head: dict) -> str | None:
    """llama or qwen3: which model file builds the head, or None for a class vLLM lacks."""
    names = strings_of(head.get("architectures"))
    return HEAD_CLASSES.get(names[0]) if names else None


def fc_width(head: dict) -> tuple[int, str]:
    """How many target hidden states the head's fc takes, and the key that says so
    (llama_eagle3.py:209-216; qwen3_eagle3.py:201-209)."""
    nested = nested_block(head, "eagle_config").get("eagle_aux_hidden_state_layer_ids")
    if head_class(head) == "qwen3":
        candidates = [
            ("num_aux_layers", head.get("num_aux_layers")),
            ("num_aux_hidden_states", head.get("num_aux_hidden_states")),
            (LAYER_IDS, length_of(head.get(LAYER_IDS))),
            (NESTED_IDS, length_of(nested)),
        ]
    else:
        candidates = [
            ("num_aux_hidden_states", head.get("num_aux_hidden_states")),
            (NESTED_IDS, length_of(nested)),
        ]
    for key, value in candidates:
        if is_int(value) and value:
            return value, key
    return DEFAULT_WIDTH, "the default"


def length_of(value: object) -> int | None:
    return len(value) if isinstance(value, list) and value else None


def captured_layers(head: dict, num_target_layers: object) -> tuple[object, str | None]:
    """The target layer ids vLLM captures and the key they come from; None as the key
    means the target's defaults (eagle3_utils.py:24-30,103-139, interfaces.py:1764-1785)."""
    for key, shift in CAPTURE_ORDER:
        *parent, name = key.split(".")
        ids = (nested_block(head, parent[0]) if parent else head).get(name)
        if not ids:
            continue
        if shift and isinstance(ids, list) and all(is_int(i) for i in ids):
            return [i + shift for i in ids], key
        return ids, key
    if is_int(num_target_layers):
        return default_layers(num_target_layers), None
    return None, None


def default_layers(num_target_layers: int) -> list[int]:
    """The target's own choice when the head names none: (2, n // 2, n - 3)."""
    return [2, num_target_layers // 2, num_target_layers - 3]


def trained_steps(config: dict) -> int | None:
    """The speculative tokens of the first proposal method: what the head was trained for."""
    methods = nested_block(config, "speculators_config").get("proposal_methods")
    if isinstance(methods, list) and methods and isinstance(methods[0], dict):
        steps = methods[0].get("speculative_tokens")
        return steps if is_int(steps) else None
    return None


def verifier(config: dict) -> dict:
    return nested_block(nested_block(config, "speculators_config"), "verifier")


@dataclass(frozen=True)
class HeadInputs:
    config: dict
    format: str
    head: dict
    target: dict  # the target's text-model fields
    tensors: dict[str, dict] | None
    profile: Profile | None
    num_speculative_tokens: int | None
    profile_named: bool = True

    @property
    def trained_as_profile(self) -> bool:
        """Whether the profile's layers are the ones the head was trained on: the profile
        was asked for, or the head's config is the profile's own."""
        return self.profile is not None and (
            self.profile_named or self.config == self.profile.config
        )

    def path(self, key: str) -> str:
        """Where a key of the served config is written in the file: a speculators head's
        copied keys at the top level (the ids only when set there: algos.py:47-50)."""
        if self.format != SPECULATORS or (key in COPIED_KEYS and key != LAYER_IDS):
            return key
        return key if key == LAYER_IDS and self.config.get(key) else f"{LAYER_CONFIG}.{key}"

    @property
    def layers(self) -> object:
        return self.target.get("num_hidden_layers")


def is_int(value: object) -> TypeIs[int]:
    return isinstance(value, int) and not isinstance(value, bool)
