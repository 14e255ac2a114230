"""Tiny models for the real vLLM in the lab, made here from local text: no hub, ever.

Run with the real server's Python (it has torch, transformers and tokenizers):
`VENV/bin/python -m orchestrator.lab.tiny_models OUT_DIR` with this package on
PYTHONPATH, or by path. It imports nothing of orch, so the lab can run it in a
venv that has only vLLM. It writes, under OUT_DIR:

- `tiny-target`: a Qwen3 (hidden 128, 2 layers, 4 heads, 2 KV heads, float32,
  random weights, safetensors) with a byte-level BPE tokenizer of up to 4,096
  tokens trained on the probe prompts and passages, and a ChatML template;
- `tiny-draft-other`: the same shape with other random weights (a bad drafter);
- `tiny-eagle3`: an EAGLE-3 head for it (vLLM's own format: one Llama layer);
- `tiny-dflash`: a DFlash drafter whose every layer is a sliding-window layer;
- `deep-target`: a wider Qwen3 of DEEP_LAYERS layers whose layers after the first add
  exactly nothing (their o_proj and down_proj are zero, so each layer's residual update
  is zero): they cost a full layer's compute and change no logit. Speculation can pay
  here: a drafter as cheap as one layer predicts the target exactly;
- `deep-draft`: that drafter, one layer equal to the target's first (same embeddings,
  layer 0, final norm and lm_head): it agrees with the target on every token;
- `deep-draft-perturbed`: the same with noise added to its layer, which agrees partly.

Random weights give near-flat distributions: under greedy sampling the target
drafting for itself accepts every token (mean acceptance length k + 1), any
other drafter almost none (1.0). Same seeds, same text: the same files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NamedTuple

VOCAB = 4096


class Width(NamedTuple):
    """A model's widths: hidden size, MLP size, attention heads and KV heads."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


TINY = Width(hidden=128, intermediate=256, heads=4, kv_heads=2)
HIDDEN = TINY.hidden
TARGET_LAYERS = 2
DEEP = Width(hidden=512, intermediate=1536, heads=8, kv_heads=4)
DEEP_LAYERS = 12
"""Sized so that on 2 cores the exact one-layer drafter pays at one stream (see
docs and `orchestrator/lab/speed_costs.yaml` for the measured speedups), while the
target (about 45M float32 parameters) is made and loaded in seconds."""
DEEP_NOISE = 0.01
"""Standard deviation of the noise added to the perturbed drafter's layer (its
weights are drawn at 0.02)."""
MAX_POSITIONS = 8192
DFLASH_WINDOW = 256
DFLASH_BLOCK = 4
DFLASH_TARGET_LAYERS = [TARGET_LAYERS // 2]
"""z-lab's default for one drafter layer: the target's middle layer."""
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
"""Added tokens, ids 0.. in this order: pad (and bos), ChatML's two, and DFlash's mask."""
PAD, EOS, MASK = 0, 2, 3
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
PROBE_TEXTS = ("builtin.jsonl", "long.jsonl")
"""The gate's own prompts and passages (orchestrator/probes): the tokenizer's training text."""
TARGET, DRAFT_OTHER = "tiny-target", "tiny-draft-other"
EAGLE3, DFLASH = "tiny-eagle3", "tiny-dflash"
DEEP_TARGET, DEEP_DRAFT, DEEP_DRAFT_PERTURBED = "deep-target", "deep-draft", "deep-draft-perturbed"
DEEP_DRAFTS = (DEEP_DRAFT, DEEP_DRAFT_PERTURBED)
Shapes = dict[str, list[int]]
ModelFile = dict[str, Any]
"""A model's JSON file (config.json, tokenizer_config.json) as Hugging Face writes it:
its keys are transformers'."""
Tensors = dict[str, Any]
"""Weights by name, as safetensors stores them: torch's tensors (typed Any: torch is
imported in the real server's venv only)."""


def tokenizer_config() -> ModelFile:
    """tokenizer_config.json: the special tokens as transformers writes them, and ChatML."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {
            str(i): {
                "content": token,
                "special": True,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "single_word": False,
            }
            for i, token in enumerate(SPECIAL)
        },
        "eos_token": SPECIAL[EOS],
        "pad_token": SPECIAL[PAD],
        "bos_token": None,
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHATML,
    }


def _attention(width: Width = TINY, **fields: Any) -> ModelFile:
    return {
        "hidden_size": width.hidden,
        "intermediate_size": width.intermediate,
        "num_attention_heads": width.heads,
        "num_key_value_heads": width.kv_heads,
        "head_dim": width.head_dim,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "vocab_size": VOCAB,
        "tie_word_embeddings": False,
        "bos_token_id": PAD,
        "eos_token_id": EOS,
        "torch_dtype": "float32",
        **fields,
    }


def target_config(width: Width = TINY, layers: int = TARGET_LAYERS) -> ModelFile:
    return _attention(
        width,
        architectures=["Qwen3ForCausalLM"],
        model_type="qwen3",
        num_hidden_layers=layers,
        pad_token_id=PAD,
        use_sliding_window=False,
        sliding_window=None,
    )


def eagle3_config() -> ModelFile:
    """vLLM's own EAGLE-3 head format (llama_eagle3.py): one Llama layer over
    [embedding, hidden state], fed by three target layers through `fc`."""
    return _attention(
        architectures=["LlamaForCausalLMEagle3"],
        model_type="llama",
        num_hidden_layers=1,
        draft_vocab_size=VOCAB,
        target_hidden_size=HIDDEN,
    )


def dflash_config() -> ModelFile:
    """A DFlash drafter of one sliding-window layer and no full one: the CPU build runs
    vLLM's V1 model runner, which refuses a drafter mixing the two."""
    return _attention(
        architectures=["DFlashDraftModel"],
        model_type="qwen3",
        block_size=DFLASH_BLOCK,
        dflash_config={"mask_token_id": MASK, "target_layer_ids": DFLASH_TARGET_LAYERS},
        num_hidden_layers=1,
        num_target_layers=TARGET_LAYERS,
        layer_types=["sliding_attention"],
        sliding_window=DFLASH_WINDOW,
        use_sliding_window=True,
    )


def decoder_layer(prefix: str, qkv_input: int, q_k_norm: bool, width: Width = TINY) -> Shapes:
    hidden, inter, head_dim = width.hidden, width.intermediate, width.head_dim
    shapes = {
        f"{prefix}.self_attn.q_proj.weight": [width.heads * head_dim, qkv_input],
        f"{prefix}.self_attn.k_proj.weight": [width.kv_heads * head_dim, qkv_input],
        f"{prefix}.self_attn.v_proj.weight": [width.kv_heads * head_dim, qkv_input],
        f"{prefix}.self_attn.o_proj.weight": [hidden, width.heads * head_dim],
        f"{prefix}.mlp.gate_proj.weight": [inter, hidden],
        f"{prefix}.mlp.up_proj.weight": [inter, hidden],
        f"{prefix}.mlp.down_proj.weight": [hidden, inter],
        f"{prefix}.input_layernorm.weight": [hidden],
        f"{prefix}.post_attention_layernorm.weight": [hidden],
    }
    if q_k_norm:
        shapes[f"{prefix}.self_attn.q_norm.weight"] = [head_dim]
        shapes[f"{prefix}.self_attn.k_norm.weight"] = [head_dim]
    return shapes


def target_shapes(width: Width = TINY, layers: int = TARGET_LAYERS) -> Shapes:
    shapes = {"model.embed_tokens.weight": [VOCAB, width.hidden]}
    for i in range(layers):
        shapes.update(decoder_layer(f"model.layers.{i}", width.hidden, q_k_norm=True, width=width))
    shapes["model.norm.weight"] = [width.hidden]
    shapes["lm_head.weight"] = [VOCAB, width.hidden]
    return shapes


def eagle3_shapes() -> Shapes:
    shapes = decoder_layer("midlayer", 2 * HIDDEN, q_k_norm=False)
    shapes["midlayer.hidden_norm.weight"] = [HIDDEN]
    shapes["fc.weight"] = [HIDDEN, 3 * HIDDEN]
    shapes["norm.weight"] = [HIDDEN]
    shapes["lm_head.weight"] = [VOCAB, HIDDEN]
    return shapes


def dflash_shapes() -> Shapes:
    """As the published DFlash checkpoints hold them: fc, hidden_norm, norm, layers."""
    shapes = decoder_layer("layers.0", HIDDEN, q_k_norm=True)
    shapes["fc.weight"] = [HIDDEN, len(DFLASH_TARGET_LAYERS) * HIDDEN]
    shapes["hidden_norm.weight"] = [HIDDEN]
    shapes["norm.weight"] = [HIDDEN]
    return shapes


MODELS: dict[str, tuple[ModelFile, Shapes, int, bool]] = {
    TARGET: (target_config(), target_shapes(), 1, True),
    DRAFT_OTHER: (target_config(), target_shapes(), 2, True),
    EAGLE3: (eagle3_config(), eagle3_shapes(), 3, False),
    DFLASH: (dflash_config(), dflash_shapes(), 4, False),
    DEEP_TARGET: (target_config(DEEP, DEEP_LAYERS), target_shapes(DEEP, DEEP_LAYERS), 5, True),
    DEEP_DRAFT: (target_config(DEEP, 1), target_shapes(DEEP, 1), 5, True),
    DEEP_DRAFT_PERTURBED: (target_config(DEEP, 1), target_shapes(DEEP, 1), 6, True),
}
"""Each model: its config.json, its tensors, the seed of its weights (of its noise for
the perturbed drafter, whose weights are the exact drafter's plus noise), whether it
ships the tokenizer (a `draft_model` drafter is a whole model: it ships one too)."""
ZEROED = (".self_attn.o_proj.weight", ".mlp.down_proj.weight")
"""The deep target's tensors that are zero in every layer after the first."""


def training_text() -> list[str]:
    probes = Path(__file__).resolve().parent.parent / "probes"
    lines = []
    for name in PROBE_TEXTS:
        for line in (probes / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                lines.append(json.loads(line)["prompt"])
    return lines


def train_tokenizer() -> str:
    """tokenizer.json of a byte-level BPE trained on the probe text (`tokenizers` only)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(), trainer)
    return tokenizer.to_str()


def random_weights(shapes: Shapes, seed: int) -> Tensors:
    """Norm weights at one, the rest small and random (as a fresh model is initialised)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return {
        name: torch.ones(shape)
        if name.endswith("norm.weight")
        else torch.randn(shape, generator=generator) * 0.02
        for name, shape in shapes.items()
    }


def deep_target_weights() -> Tensors:
    """Random weights whose layers after the first write nothing to the residual stream."""
    _config, shapes, seed, _ships = MODELS[DEEP_TARGET]
    tensors = random_weights(shapes, seed)
    for name, tensor in tensors.items():
        if name.endswith(ZEROED) and not name.startswith("model.layers.0."):
            tensor.zero_()
    return tensors


def deep_draft_weights(target: Tensors, name: str) -> Tensors:
    """The target's embeddings, first layer, final norm and lm_head; the perturbed
    drafter adds noise of DEEP_NOISE to its layer's matrices."""
    import torch

    _config, shapes, seed, _ships = MODELS[name]
    tensors = {tensor: target[tensor].clone() for tensor in shapes}
    if name == DEEP_DRAFT_PERTURBED:
        generator = torch.Generator().manual_seed(seed)
        for tensor, value in tensors.items():
            if tensor.startswith("model.layers.0.") and not tensor.endswith("norm.weight"):
                value += torch.randn(value.shape, generator=generator) * DEEP_NOISE
    return tensors


def all_weights() -> dict[str, Tensors]:
    """Every model's tensors by name."""
    deep = deep_target_weights()
    made = {
        name: random_weights(shapes, seed)
        for name, (_config, shapes, seed, _ships) in MODELS.items()
        if name not in (DEEP_TARGET, *DEEP_DRAFTS)
    }
    made[DEEP_TARGET] = deep
    for name in DEEP_DRAFTS:
        made[name] = deep_draft_weights(deep, name)
    return made


def make_all(out: Path) -> None:
    from safetensors.torch import save_file

    tokenizer = train_tokenizer()
    weights = all_weights()
    for name, (config, _shapes, _seed, ships_tokenizer) in MODELS.items():
        directory = out / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(weights[name], str(directory / "model.safetensors"), metadata={"format": "pt"})
        if ships_tokenizer:
            (directory / "tokenizer.json").write_text(tokenizer)
            (directory / "tokenizer_config.json").write_text(
                json.dumps(tokenizer_config(), indent=2) + "\n"
            )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tiny_models.py OUT_DIR")
    make_all(Path(sys.argv[1]))
