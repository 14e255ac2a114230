"""Model directories shaped like the published ones, at no disk cost.

The target has its real config.json (with `text_config`), its tokenizer's
special tokens, a safetensors index and shards whose headers are real and
whose data is sparse. The drafter ships `model.safetensors` and no
`config.json`, as it was published; its config is kept as the vLLM stand-in's
ground truth only.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.drafters.kinds.dflash import weight_layout
from orchestrator.drafters.modelfiles import text_config, write_safetensors_stub
from orchestrator.drafters.profiles import Profile, target_files
from orchestrator.lab.layout import ContainerPaths

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


def write_drafter_dir(directory: Path, profile: Profile) -> None:
    """The drafter as published: weights, no config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors_stub(directory / "model.safetensors", weight_layout(profile.config))


def install_models(container: ContainerPaths, models_dir: Path, profile: Profile) -> None:
    """Target and drafter dirs in the container, and the drafter's truth for the stand-in."""
    target_name = profile.target_name.rsplit("/", 1)[-1]
    drafter_name = profile.name.rsplit("/", 1)[-1]
    write_target_dir(models_dir / target_name, profile)
    write_drafter_dir(models_dir / drafter_name, profile)
    truth = container.truth(drafter_name)
    truth.parent.mkdir(parents=True, exist_ok=True)
    truth.write_text(json.dumps(profile.config, indent=2) + "\n")
