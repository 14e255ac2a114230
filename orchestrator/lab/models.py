"""Model directories shaped like the published ones, at no disk cost.

The target has its real config.json (with `text_config`), its tokenizer's
special tokens, a safetensors index and shards whose headers are real and
whose data is sparse. The drafter dir is shaped by its kind: a DFlash drafter
ships `model.safetensors` and no `config.json`, as it was published; an
EAGLE-3 head ships its own `config.json`; MTP drafts with the target's own
heads and has no dir. The drafter's config is also kept as the vLLM
stand-in's ground truth.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from orchestrator.drafters.kinds.dflash import weight_layout
from orchestrator.drafters.modelfiles import CONFIG_FILE, text_config, write_safetensors_stub
from orchestrator.drafters.profiles import Profile, target_files
from orchestrator.lab.paths import ContainerPaths

TARGET_SHARDS = 4


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


def write_target_dir(directory: Path, profile: Profile) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    files = target_files(profile.name)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    layout = list(target_layout(json.loads(files["config.json"])).items())
    weight_map = {}
    per_shard = -(-len(layout) // TARGET_SHARDS)
    for index in range(TARGET_SHARDS):
        shard = f"model-{index + 1:05d}-of-{TARGET_SHARDS:05d}.safetensors"
        tensors = dict(layout[index * per_shard : (index + 1) * per_shard])
        write_safetensors_stub(directory / shard, tensors)
        weight_map.update(dict.fromkeys(tensors, shard))
    index_file = {"metadata": {}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index_file, indent=2))


def write_drafter_dir(directory: Path, profile: Profile) -> dict:
    """A DFlash drafter as published: weights, no config.json. Returns its config."""
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors_stub(directory / "model.safetensors", weight_layout(profile.config))
    return profile.config


def eagle3_head_config(profile: Profile) -> dict:
    """The head's config.json: the profile's published fields, and a layer at the width and
    vocabulary of its target (the shape fields a speculators config carries)."""
    target = text_config(json.loads(target_files(profile.name)[CONFIG_FILE]))
    layer = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": target["hidden_size"],
        "intermediate_size": target["intermediate_size"],
        "num_attention_heads": target["num_attention_heads"],
        "num_key_value_heads": target["num_key_value_heads"],
        "num_hidden_layers": 1,
        "vocab_size": target["vocab_size"],
    }
    return {**profile.config, "transformer_layer_config": layer}


def write_eagle3_dir(directory: Path, profile: Profile) -> dict:
    """An EAGLE-3 head in the speculators format: its own config.json and its weights."""
    config = eagle3_head_config(profile)
    hidden = config["transformer_layer_config"]["hidden_size"]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    layout = {"fc.weight": ("BF16", [hidden, 3 * hidden]), "norm.weight": ("BF16", [hidden])}
    write_safetensors_stub(directory / "model.safetensors", layout)
    return config


DRAFTER_DIRS: dict[str, Callable[[Path, Profile], dict]] = {
    "dflash": write_drafter_dir,
    "eagle3": write_eagle3_dir,
}
"""How each kind's drafter dir is built; kinds without a drafter dir (MTP) have none."""


def install_models(container: ContainerPaths, models_dir: Path, profile: Profile) -> None:
    """Target and drafter dirs in the container, and the drafter's truth for the stand-in."""
    target_name = profile.target_name.rsplit("/", 1)[-1]
    write_target_dir(models_dir / target_name, profile)
    writer = DRAFTER_DIRS.get(profile.kind)
    if writer is None:
        return
    drafter_name = profile.name.rsplit("/", 1)[-1]
    config = writer(models_dir / drafter_name, profile)
    truth = container.truth(drafter_name)
    truth.parent.mkdir(parents=True, exist_ok=True)
    truth.write_text(json.dumps(config, indent=2) + "\n")
