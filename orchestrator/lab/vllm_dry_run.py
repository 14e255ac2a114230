"""The lab's answer to orch's server check: what the vLLM release the stand-in claims
says of one launch, in the reply `container/validator_program.py` gives from real vLLM.

The lab's `vllm` is a console script whose interpreter is the lab's (paths.py), so the
check finds it as it finds a venv's Python and runs `PYTHON - REQUEST` (the program on
stdin, unread here). The stages are the real program's, each refused as the claimed
release refuses at start, from the lab's release data through the stand-in's own
readers (`vllm_standin.py`, `releases.py`), never from orch's tables:
  parser             the stand-in's `vllm serve` flags
  environment        the release's reading of VLLM_USE_V2_MODEL_RUNNER
  engine_args        nothing to refuse here
  model_config       the target's config.json
  speculative_config SpeculativeConfig's fields and methods for the release
  drafter_layers     DFlash: a windowless sliding layer, mixed layers where refused;
                     each layer's (window, causal) as 0.32.0 resolves them (a sliding
                     layer: its window, causal; a full one: none, not causal; run here)
Held to the real 0.32.0's answers on the real-server lab's launches by
tests/local/test_standin_dry_run.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.container import validator_program as program
from orchestrator.lab import dflash_reading
from orchestrator.lab.releases import Release, release
from orchestrator.lab.vllm_standin import (
    V2_RUNNER_ENV,
    claimed_version,
    mixed_layers_run_as_full,
    parse_args,
    parse_speculative_config,
    read_json,
    runner_env,
    vllm_error,
)

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
Stage = Callable[[dict, dict], tuple[str, dict]]


def describe(exc: BaseException) -> str:
    """As the program words an exception (pydantic's keeps its own name)."""
    return f"{type(exc).__qualname__}: {exc}"


def parser(request: dict, state: dict) -> tuple[str, dict]:
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            state["args"] = parse_args(request["argv"])
    except SystemExit:
        raise ValueError(errors.getvalue().strip()) from None
    return f"vllm {' '.join(request['argv'][:2])} ... parsed", {}


def environment(request: dict, state: dict) -> tuple[str, dict]:
    checked = []
    for name in sorted(request["env"]):
        if name == V2_RUNNER_ENV:
            try:
                runner_env(state["release"])
            except ValueError as exc:
                raise ValueError(f"{name}={request['env'][name]!r}: {describe(exc)}") from exc
        checked.append(name)
    return "checked: " + ", ".join(checked), {}


def engine_args(request: dict, state: dict) -> tuple[str, dict]:
    return "AsyncEngineArgs.from_cli_args", {}


def model_config(request: dict, state: dict) -> tuple[str, dict]:
    state["target"] = read_json(Path(state["args"].model_tag) / "config.json")
    return "target " + ", ".join(map(str, state["target"].get("architectures") or [])), {}


def speculative_config(request: dict, state: dict) -> tuple[str, dict]:
    config = state["args"].speculative_config
    if config is None:
        state["speculative"] = None
        return "no speculative decoding", {}
    state["speculative"] = parse_speculative_config(config, state["release"])
    return f"method {config['method']}", {}


def drafter_layers(request: dict, state: dict) -> tuple[str, dict]:
    speculative = state["speculative"]
    if speculative is None or speculative["method"] != "dflash":
        return "not a DFlash launch", {}
    claimed: Release = state["release"]
    drafter = read_json(Path(speculative["model"]) / "config.json")
    windowless = claimed.fact("windowless_dflash_drafter")
    if windowless.error and dflash_reading.windowless(drafter):
        raise vllm_error(windowless.error)
    if dflash_reading.is_mixed(drafter):
        mixed_layers_run_as_full(claimed, runner_env(claimed))
    window = dflash_reading.window(drafter)
    layers = [
        (window, True) if s else (None, False) for s in dflash_reading.sliding_layers(drafter)
    ]
    text = "; ".join(f"{i}: window {w}, causal {c}" for i, (w, c) in enumerate(layers))
    return text, {"layers": [list(layer) for layer in layers]}


STAGES: tuple[Stage, ...] = tuple(globals()[stage.__name__] for stage in program.STAGES)
"""This module's stage of each name the program runs, in the program's order (a stage
the program gains and this module lacks fails at import)."""


def answer(request: dict) -> dict[str, Any]:
    """The reply for one request; the first refusal ends it, as in the program."""
    began = time.monotonic()
    os.environ.update(OFFLINE)
    os.environ.update(request["env"])
    state: dict[str, Any] = {"release": release(claimed_version())}
    report: dict[str, Any] = {"version": claimed_version(), "stages": []}
    with tempfile.TemporaryDirectory(prefix="orch-dry-run-") as scratch:
        request = dict(request, argv=program.staged(request, scratch))
        for stage in STAGES:
            started = time.monotonic()
            try:
                status, (detail, extra) = "ok", stage(request, state)
            except (ValueError, NotImplementedError, OSError, KeyError) as exc:
                status, detail, extra = "error", describe(exc), {}
            if stage is parser and status == "error":
                detail = detail.removeprefix("ValueError: ")  # argparse's own words
            entry = {"name": stage.__name__, "status": status, "detail": detail, **extra}
            report["stages"].append({**entry, "seconds": round(time.monotonic() - started, 3)})
            if status == "error":
                break
    report["seconds"] = round(time.monotonic() - began, 3)
    return report


def main(argv: list[str]) -> int:
    """`- REQUEST` as the lab interpreter passes it: the reply on stdout and nothing else
    (what the stand-in logs goes to stderr while it runs, as in the program)."""
    with contextlib.redirect_stdout(sys.stderr):
        reply = answer(json.loads(argv[-1]))
    print(json.dumps(reply))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
