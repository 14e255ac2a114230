"""Model directories shaped like the published ones, at no disk cost.

Built from the lab's own copies of the published files (`published/`: the
configs as their publishers ship them), never from orch's drafter profiles or
target tables, so that a wrong profile meets the lab as it would meet the
field: a refused start or a failed gate, not a lab that agrees with it.

The target has its real config.json (with `text_config`), its tokenizer's
special tokens, a safetensors index and shards whose headers are real and
whose data is sparse. The drafter dir is shaped by its kind: a DFlash drafter
ships `model.safetensors` and no `config.json`, as it was published; an
EAGLE-3 head ships its own `config.json`; MTP drafts with the target's own
layers and has no dir. Each drafter's published config is also the vLLM
stand-in's ground truth.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from orchestrator.drafters.modelfiles import CONFIG_FILE, text_config, write_safetensors_stub
from orchestrator.lab.paths import ContainerPaths

PUBLISHED_DIR = Path(__file__).parent / "published"
TARGETS = ("Qwen3-8B", "Qwen3.6-27B")
"""Targets the lab installs: `published/NAME.config.json` and `NAME.tokenizer_config.json`."""
DRAFTERS = {
    "z-lab/Qwen3.6-27B-DFlash": "dflash",
    "z-lab/Qwen3-8B-DFlash-b16": "dflash",
    "RedHatAI/Qwen3-8B-speculator.eagle3": "eagle3",
}
"""Drafters the lab installs, by repository and kind: `published/OWNER_NAME.config.json`.
The EAGLE-3 head's file holds the fields public copies of its config confirm, with a
decoder layer at its target's width and vocabulary. MTP needs no drafter: it drafts with
the Qwen3.6-27B target's own layers."""
TARGET_SHARDS = 4
DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def published_file(name: str) -> bytes:
    return (PUBLISHED_DIR / name).read_bytes()


def published_drafter_config(repository: str) -> dict:
    """A drafter's config.json as published (the lab's copy)."""
    return json.loads(published_file(repository.replace("/", "_") + ".config.json"))


def target_layout(config: dict) -> dict[str, tuple[str, list[int]]]:
    """A Qwen-shaped tensor layout: embeddings, per-layer norms and projections, lm_head."""
    text = text_config(config)
    hidden, vocab, layers = text["hidden_size"], text["vocab_size"], text["num_hidden_layers"]
    inter = text["intermediate_size"]
    layout = {"model.embed_tokens.weight": ("BF16", [vocab, hidden])}
    for i in range(layers):
        prefix = f"model.layers.{i}"
        layout[f"{prefix}.input_layernorm.weight"] = ("BF16", [hidden])
        layout[f"{prefix}.mlp.gate_proj.weight"] = ("BF16", [inter, hidden])
        layout[f"{prefix}.mlp.up_proj.weight"] = ("BF16", [inter, hidden])
        layout[f"{prefix}.mlp.down_proj.weight"] = ("BF16", [hidden, inter])
    layout["model.norm.weight"] = ("BF16", [hidden])
    layout["lm_head.weight"] = ("BF16", [vocab, hidden])
    return layout


def dflash_layout(config: dict) -> dict[str, tuple[str, list[int]]]:
    """Tensor names, dtypes and shapes of a DFlash checkpoint with this config: fc
    (target features -> hidden), hidden_norm, norm and Qwen3 decoder layers; embeddings
    and lm_head are the target's."""
    dtype = DTYPES[config.get("dtype") or config.get("torch_dtype") or "bfloat16"]
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = config["head_dim"]
    q_out = config["num_attention_heads"] * head_dim
    kv_out = config["num_key_value_heads"] * head_dim
    ids = config["dflash_config"]["target_layer_ids"]
    layout = {
        "fc.weight": (dtype, [hidden, len(ids) * hidden]),
        "hidden_norm.weight": (dtype, [hidden]),
        "norm.weight": (dtype, [hidden]),
    }
    for i in range(config["num_hidden_layers"]):
        for name, shape in (
            ("self_attn.q_proj.weight", [q_out, hidden]),
            ("self_attn.k_proj.weight", [kv_out, hidden]),
            ("self_attn.v_proj.weight", [kv_out, hidden]),
            ("self_attn.o_proj.weight", [hidden, q_out]),
            ("self_attn.q_norm.weight", [head_dim]),
            ("self_attn.k_norm.weight", [head_dim]),
            ("mlp.gate_proj.weight", [inter, hidden]),
            ("mlp.up_proj.weight", [inter, hidden]),
            ("mlp.down_proj.weight", [hidden, inter]),
            ("input_layernorm.weight", [hidden]),
            ("post_attention_layernorm.weight", [hidden]),
        ):
            layout[f"layers.{i}.{name}"] = (dtype, shape)
    return layout


def write_target_dir(directory: Path, target: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for file_name in (CONFIG_FILE, "tokenizer_config.json"):
        (directory / file_name).write_bytes(published_file(f"{target}.{file_name}"))
    layout = list(target_layout(json.loads(published_file(f"{target}.{CONFIG_FILE}"))).items())
    weight_map = {}
    per_shard = -(-len(layout) // TARGET_SHARDS)
    for index in range(TARGET_SHARDS):
        shard = f"model-{index + 1:05d}-of-{TARGET_SHARDS:05d}.safetensors"
        tensors = dict(layout[index * per_shard : (index + 1) * per_shard])
        write_safetensors_stub(directory / shard, tensors)
        weight_map.update(dict.fromkeys(tensors, shard))
    index_file = {"metadata": {}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index_file, indent=2))


def write_dflash_dir(directory: Path, config: dict) -> None:
    """A DFlash drafter as published: weights, no config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors_stub(directory / "model.safetensors", dflash_layout(config))


def write_eagle3_dir(directory: Path, config: dict) -> None:
    """An EAGLE-3 head in the speculators format: its own config.json and its weights."""
    hidden = config["transformer_layer_config"]["hidden_size"]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    layout = {"fc.weight": ("BF16", [hidden, 3 * hidden]), "norm.weight": ("BF16", [hidden])}
    write_safetensors_stub(directory / "model.safetensors", layout)


DRAFTER_DIRS: dict[str, Callable[[Path, dict], None]] = {
    "dflash": write_dflash_dir,
    "eagle3": write_eagle3_dir,
}
"""How each kind's drafter dir is built from its published config."""


def install_models(container: ContainerPaths, models_dir: Path) -> None:
    """Every published target and drafter dir in the container, and each drafter's
    published config as the stand-in's truth."""
    for target in TARGETS:
        write_target_dir(models_dir / target, target)
    container.truth_dir.mkdir(parents=True, exist_ok=True)
    for repository, kind in DRAFTERS.items():
        config = published_drafter_config(repository)
        name = repository.rsplit("/", 1)[-1]
        DRAFTER_DIRS[kind](models_dir / name, config)
        container.truth(name).write_text(json.dumps(config, indent=2) + "\n")
