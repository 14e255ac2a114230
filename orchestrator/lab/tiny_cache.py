"""The tiny models of the real-server lab: made once per machine, then linked into each
container's models dir.

They are made by `tiny_models.py` in the real server's venv (torch, tokenizers) and
kept under `$ORCH_LAB_MODEL_CACHE`, else `$XDG_CACHE_HOME/orch/tiny-models`, in a
directory named by the hash of what makes them (the maker and its training text):
a change to either makes new ones. A stand-in lab gets the same configs, tokenizer
config and tensor shapes as sparse stubs, without torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from orchestrator.drafters.modelfiles import write_safetensors_stub
from orchestrator.errors import InputError
from orchestrator.lab import tiny_models
from orchestrator.lab.paths import ContainerPaths

CACHE_ENV = "ORCH_LAB_MODEL_CACHE"
MAKE_TIMEOUT = 900.0


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "orch" / "tiny-models"


def maker_key() -> str:
    """Hash of the maker and its training text: same inputs, same models."""
    digest = hashlib.sha256(Path(tiny_models.__file__).read_bytes())
    for line in tiny_models.training_text():
        digest.update(line.encode())
    return digest.hexdigest()[:16]


def ensure_made(venv: Path) -> Path:
    """The cached models, made now with the venv's Python when missing."""
    made = cache_root() / maker_key()
    if (made / tiny_models.TARGET / "model.safetensors").exists():
        return made
    made.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".making-", dir=made.parent))
    try:
        done = subprocess.run(
            [str(venv / "bin" / "python"), tiny_models.__file__, str(work)],
            capture_output=True,
            text=True,
            timeout=MAKE_TIMEOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise InputError(f"making the lab's tiny models with {venv}/bin/python failed: {last}")
        try:
            work.rename(made)
        except OSError:
            if not made.exists():  # another lab made them meanwhile otherwise
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return made


def link_into(made: Path, models_dir: Path) -> None:
    """Hard links into a container's models dir (a copy across file systems)."""
    for source in made.rglob("*"):
        if source.is_dir():
            continue
        destination = models_dir / source.relative_to(made)
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, destination)
        except OSError:
            shutil.copy2(source, destination)


def write_stubs(container: ContainerPaths, models_dir: Path) -> None:
    """The tiny models for a stand-in: real configs, sparse weights, and each drafter's
    config as the stand-in's truth."""
    for name, (config, shapes, _seed, ships_tokenizer) in tiny_models.MODELS.items():
        directory = models_dir / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        write_safetensors_stub(
            directory / "model.safetensors",
            {tensor: ("F32", shape) for tensor, shape in shapes.items()},
        )
        if ships_tokenizer:
            (directory / "tokenizer_config.json").write_text(
                json.dumps(tiny_models.tokenizer_config(), indent=2) + "\n"
            )
        else:
            truth = container.truth(name)
            truth.parent.mkdir(parents=True, exist_ok=True)
            truth.write_text(json.dumps(config, indent=2) + "\n")
