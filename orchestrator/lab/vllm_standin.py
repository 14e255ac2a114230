"""The lab's `vllm`: a real process that takes `vllm serve`'s flags and answers like it.

Lifecycle of one server (`ORCH_LAB_CONTAINER` names its container's directory):
parse the flags (an unknown flag is a usage error, exit 2) -> read the fault
knobs -> bind the port -> read the target, speculative and drafter configs
(any problem raises: a Python traceback and exit 1, as vLLM does) -> take GPU
memory, recorded in `lab/servers/<pid>.json` -> "load weights" for
`--load-seconds` with the port bound but not listening (connections refused)
-> listen and serve the OpenAI routes, `/health` and `/metrics` -> on SIGTERM
stop serving, drop the record, exit 0.

Drafts are accepted according to `acceptance.py`: the deployed drafter config
is compared with the published one in `lab/truth/` and with its `fc.weight`,
and, when sliding layers run as full attention, with the request's context.
Each engine step (one draft and its verification, or one token without a
drafter) takes 1 / `--tokens-per-second` seconds: the target's decode speed
per stream without speculation.

The server behaves like the vLLM version it claims (`ORCH_LAB_VLLM_VERSION`,
default the newest row of the capability table, `serving/vllm.yaml`): a method
the version lacks is refused, a drafter mixing sliding and full attention layers
is refused, needs the V2 runner's variable, or has its sliding layers run as
full attention, as that version's row says (the `swa_as_full_attention` fault
knob forces the last on any version); `lab/live.json`'s `acceptance_scale`, re-read
while serving, scales every position's acceptance (`orch lab acceptance`); a zero lm_head leaves a
`*ForConditionalGeneration` target near-zero acceptance; `/health` answers 503
for a short warm-up once listening. Imports stay light: an idle server must
stay small.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import random
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import choose_encoder

from orchestrator.drafters.modelfiles import (
    parse_safetensors_header,
    safetensors_header_length,
    text_config,
)
from orchestrator.drafters.window import served_window
from orchestrator.lab.acceptance import (
    acceptance_profile,
    collapsed_past_window,
    eagle3_profile,
    mtp_profile,
    ngram_profile,
    request_multiplier,
    sample_accepted,
    zero_head_profile,
)
from orchestrator.lab.layout import (
    CONTAINER_ENV,
    DEFAULT_TOKENS_PER_SECOND,
    TOKENS_PER_SECOND_ENV,
    VLLM_VERSION_ENV,
    ContainerPaths,
    read_gpus,
    server_records,
    write_json_atomic,
)
from orchestrator.serving.capabilities import (
    FULL_ATTENTION,
    REFUSED,
    V2_RUNNER,
    Capabilities,
    capabilities_for,
    newest_version,
)
from orchestrator.serving.judge import conditional_generation, is_mixed, runner_enabled

FAULTS_ENV = "ORCH_LAB_FAULTS"
LOAD_SECONDS_ENV = "ORCH_LAB_LOAD_SECONDS"
STATS_INTERVAL_ENV = "VLLM_LOG_STATS_INTERVAL"
DEFAULT_LOAD_SECONDS = 2.0
DEFAULT_STATS_INTERVAL = 5.0
LIVE_RECHECK_SECONDS = 0.5
WARMUP_SECONDS = 0.5
"""How long /health answers 503 after the port starts listening, where the row says so."""
DEFAULT_MAX_TOKENS = 16
FILLER = ("the", "draft", "tokens", "were", "verified", "by", "the", "target", "in", "one", "pass")
SPEC_DECODE_LINE = (
    "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
    "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
    "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
)


def log(level: str, source: str, message: str) -> None:
    """One line in vLLM's format: `INFO 12-02 11:40:01 [api_server.py:1839] message`."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"{level} {stamp} [{source}] {message}", flush=True)


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def claimed_version() -> str:
    """The vLLM version this lab container's stand-in claims to be."""
    return os.environ.get(VLLM_VERSION_ENV) or newest_version()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """`vllm serve TARGET [flags]`; an unknown flag is argparse's usage error, exit 2."""
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("--version", action="version", version=claimed_version())
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", usage="vllm serve [model_tag] [options]")
    serve.add_argument("model_tag")
    serve.add_argument("--speculative-config", type=str)
    serve.add_argument("--host", default="127.0.0.1", help="lab: loopback addresses only")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--tensor-parallel-size", type=int, default=1)
    serve.add_argument("--max-model-len", type=int)
    serve.add_argument("--served-model-name", nargs="+")
    serve.add_argument("--attention-backend")
    serve.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    serve.add_argument("--seed", type=int, help="seed of the acceptance draws (default: the port)")
    serve.add_argument("--trust-remote-code", action="store_true")
    serve.add_argument("--dtype", default="auto")
    serve.add_argument("--max-num-seqs", type=int)
    serve.add_argument("--max-num-batched-tokens", type=int)
    serve.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    serve.add_argument(
        "--load-seconds",
        type=float,
        default=float(os.environ.get(LOAD_SECONDS_ENV, DEFAULT_LOAD_SECONDS)),
        help="lab only: how long loading the weights takes",
    )
    serve.add_argument(
        "--tokens-per-second",
        type=positive_float,
        default=float(os.environ.get(TOKENS_PER_SECOND_ENV, DEFAULT_TOKENS_PER_SECOND)),
        help="lab only: engine steps per second and stream (decode speed without drafts)",
    )
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Faults:
    """Ways a server can misbehave, from `lab/faults.json` and `ORCH_LAB_FAULTS` (JSON)."""

    hang_while_loading: bool = False
    load_seconds: float | None = None  # this start loads this long (the lab's default otherwise)
    crash_after_ready_seconds: float | None = None
    ignore_sigterm: bool = False
    garbage_metrics: bool = False
    drop_spec_decode: bool = False
    drip_health_seconds: float | None = None
    """/health answers one byte of its response every this many seconds."""
    drip_metrics_seconds: float | None = None
    swa_as_full_attention: bool = False


def read_faults(container: ContainerPaths) -> Faults:
    """The file's knobs, overridden by the environment's; an unknown knob raises."""
    knobs = json.loads(container.faults.read_text()) if container.faults.exists() else {}
    knobs.update(json.loads(os.environ.get(FAULTS_ENV) or "{}"))
    return Faults(**knobs)


class SpeculativeConfigError(ValueError):
    """Raised with pydantic's wording, as vLLM's own config validation reads."""


@dataclass(frozen=True)
class Drafting:
    """What the engine needs to simulate drafts.

    `swa_as_full_attention`: the drafter's sliding layers run as full attention (the
    version does it, or the fault knob forces it), so drafts collapse once a
    request's context passes `sliding_window` (the window it was trained with).
    """

    num_speculative_tokens: int
    profile: list[float]
    sliding_window: int | None = None
    swa_as_full_attention: bool = False

    def profile_at(self, context_tokens: int) -> list[float]:
        """Conditional acceptance per position for a draft made at this context length."""
        window = self.sliding_window
        if self.swa_as_full_attention and window is not None and context_tokens > window:
            return collapsed_past_window(self.profile)
        return self.profile


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


DRAFTER_DIR_METHODS = ("dflash", "eagle3")
METHODS = (*DRAFTER_DIR_METHODS, "mtp", "ngram")
"""The methods the lab drafts with; the first ones load a drafter dir (`model`)."""


def parse_speculative_config(raw: str, capabilities: Capabilities) -> dict:
    config = json.loads(raw)
    needed: tuple[str, ...] = ("method", "num_speculative_tokens")
    if config.get("method") in DRAFTER_DIR_METHODS:
        needed += ("model",)
    missing = [key for key in needed if key not in config]
    if missing:
        errors = "\n".join(
            f"{key}\n  Field required [type=missing, input_value={config!r}, input_type=dict]"
            for key in missing
        )
        plural = "s" if len(missing) > 1 else ""
        raise SpeculativeConfigError(
            f"{len(missing)} validation error{plural} for SpeculativeConfig\n{errors}"
        )
    method = config["method"]
    if capabilities.row.serves(method) is False:
        raise SpeculativeConfigError(
            f"1 validation error for SpeculativeConfig\nmethod\n  Input should be a "
            f"speculative method vLLM {capabilities.version} knows [type=literal_error, "
            f"input_value={method!r}, input_type=str]"
        )
    if method not in METHODS:
        known = ", ".join(sorted(METHODS))
        raise ValueError(f"the lab's vLLM drafts with methods {known} only, not {method!r}")
    return config


def fc_in_features(weights: Path) -> int | None:
    """Second dimension of `fc.weight`, read from the safetensors header (None if absent)."""
    with weights.open("rb") as stream:
        first8 = stream.read(8)
        prefix = first8 + stream.read(safetensors_header_length(first8, str(weights)))
    for name, tensor in parse_safetensors_header(prefix, str(weights)).items():
        if name == "fc.weight" or name.endswith(".fc.weight"):
            return int(tensor["shape"][1])
    return None


def load_drafting(
    speculative: dict,
    container: ContainerPaths,
    capabilities: Capabilities,
    target: dict,
    forced_swa_as_full_attention: bool = False,
) -> Drafting:
    """The acceptance model of the method: DFlash and EAGLE-3 read their drafter dir.
    `forced_swa_as_full_attention` is the lab's fault knob."""
    steps = int(speculative["num_speculative_tokens"])
    if speculative["method"] == "mtp":
        return Drafting(steps, mtp_profile(target, steps))
    if speculative["method"] == "ngram":
        return Drafting(steps, ngram_profile(steps))
    if speculative["method"] == "eagle3":
        drafter = Path(speculative["model"])
        deployed = read_json(drafter / "config.json")
        truth_path = container.truth(drafter.resolve().name)
        truth = read_json(truth_path) if truth_path.exists() else None
        return Drafting(steps, eagle3_profile(deployed, truth, target, steps))
    return load_dflash(speculative, container, capabilities, target, forced_swa_as_full_attention)


def load_dflash(
    speculative: dict,
    container: ContainerPaths,
    capabilities: Capabilities,
    target: dict,
    forced_swa_as_full_attention: bool = False,
) -> Drafting:
    """Read the drafter as vLLM `capabilities.version` would, then look up the published
    config of its weights. `forced_swa_as_full_attention` is the lab's fault knob."""
    drafter = Path(speculative["model"])
    deployed = read_json(drafter / "config.json")
    swa_as_full_attention = is_mixed(deployed) and mixed_layers_run_as_full(capabilities)
    if "target_layer_ids" not in (deployed.get("dflash_config") or {}):
        raise ValueError(
            f"DFlash draft model config {drafter / 'config.json'} has no "
            "dflash_config.target_layer_ids"
        )
    weights = drafter / "model.safetensors"
    if not weights.exists():
        raise RuntimeError(f"Cannot find any model weights with `{drafter}`")
    truth_path = container.truth(weights.resolve().parent.name)
    truth = read_json(truth_path) if truth_path.exists() else None
    if truth is None:
        log("WARNING", "lab", f"no published drafter config at {truth_path}: drafts will miss")
    profile = acceptance_profile(deployed, truth, fc_in_features(weights))
    if capabilities.row.lm_head_zero_for_conditional_generation and conditional_generation(target):
        profile = zero_head_profile(len(profile))
    k = int(speculative["num_speculative_tokens"])
    return Drafting(
        k,
        profile,
        sliding_window=served_window(truth or deployed),
        swa_as_full_attention=swa_as_full_attention or forced_swa_as_full_attention,
    )


def mixed_layers_run_as_full(capabilities: Capabilities) -> bool:
    """How the version treats a drafter mixing sliding and full attention layers: refused
    or not started without the V2 runner (raises vLLM's error), or True when it runs the
    sliding layers as full attention."""
    row = capabilities.row
    refused = row.mixed_attention_drafters == REFUSED
    no_runner = row.mixed_attention_drafters == V2_RUNNER and not runner_enabled(
        os.environ.get(row.runner_env or "")
    )
    if (refused or no_runner) and row.error:
        raise NotImplementedError(row.error.removeprefix("NotImplementedError: "))
    return row.mixed_attention_drafters == FULL_ATTENTION


def require_loopback(host: str) -> None:
    """The lab never listens beyond this machine."""
    if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"the lab's vLLM listens on loopback addresses only, not {host!r}")


def visible_gpus(container: ContainerPaths) -> list[dict]:
    """The container's GPUs, narrowed and ordered by CUDA_VISIBLE_DEVICES when set."""
    gpus = read_gpus(container)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return gpus
    wanted = [name.strip() for name in visible.split(",") if name.strip()]
    return [gpu for name in wanted for gpu in gpus if name in (str(gpu["index"]), gpu["uuid"])]


def take_gpu_memory(
    container: ContainerPaths, tensor_parallel_size: int, utilization: float
) -> dict[str, int]:
    """MiB per GPU index this server holds; refused like vLLM when GPUs are short or busy."""
    gpus = visible_gpus(container)
    if len(gpus) < tensor_parallel_size:
        raise ValueError(
            f"tensor_parallel_size ({tensor_parallel_size}) is greater than the number of "
            f"available GPUs ({len(gpus)})"
        )
    held: dict[str, int] = {}
    for record in server_records(container):
        for index, mib in record["gpu_memory_mib"].items():
            held[index] = held.get(index, 0) + mib
    taken = {}
    for gpu in gpus[:tensor_parallel_size]:
        index, total = str(gpu["index"]), gpu["memory_total_mib"]
        wanted, free = int(total * utilization), total - held.get(index, 0)
        if free < wanted:
            raise ValueError(
                f"Free memory on device ({free / 1024:.2f}/{total / 1024:.2f} GiB) on startup "
                f"is less than desired GPU memory utilization ({utilization}, "
                f"{wanted / 1024:.2f} GiB). Decrease GPU memory utilization or reduce GPU "
                "memory used by other processes."
            )
        taken[index] = wanted
    return taken


class Metrics:
    """vLLM's series in a private registry; spec-decode ones only when drafting."""

    def __init__(self, model_name: str, drafting: Drafting | None, expose_spec_decode: bool):
        self.registry = CollectorRegistry()
        names = ["model_name", "engine"]
        labels = {"model_name": model_name, "engine": "0"}

        def counter(name: str, doc: str, registry: CollectorRegistry | None) -> Counter:
            return Counter(name, doc, names, registry=registry).labels(**labels)

        self.running = Gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            names,
            registry=self.registry,
        ).labels(**labels)
        self.prompt_tokens = counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", self.registry
        )
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", self.registry
        )
        if drafting is None:
            return
        spec = self.registry if expose_spec_decode else None
        self.drafts = counter("vllm:spec_decode_num_drafts", "Number of drafts.", spec)
        self.draft_tokens = counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", spec
        )
        self.accepted_tokens = counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", spec
        )
        per_position = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [*names, "position"],
            registry=spec,
        )
        self.accepted_per_position = [
            per_position.labels(**labels, position=str(i))
            for i in range(drafting.num_speculative_tokens)
        ]


@dataclass
class Interval:
    """Totals since the last periodic log line."""

    positions: int
    started: float = field(default_factory=time.monotonic)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    drafts: int = 0
    accepted: int = 0
    accepted_per_position: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.accepted_per_position = [0] * self.positions

    def log_lines(self, running: int) -> list[tuple[str, str]]:
        """vLLM's periodic lines (source, message) for this interval; none without traffic."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        if not (self.generation_tokens or running):
            return []
        lines = [
            (
                "loggers.py:123",
                f"Engine 000: Avg prompt throughput: {self.prompt_tokens / elapsed:.1f} tokens/s, "
                f"Avg generation throughput: {self.generation_tokens / elapsed:.1f} tokens/s, "
                f"Running: {running} reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%, "
                "Prefix cache hit rate: 0.0%",
            )
        ]
        if self.drafts:
            lines.append(("metrics.py:96", self.spec_decode_message(elapsed)))
        return lines

    def spec_decode_message(self, elapsed: float) -> str:
        drafted = self.drafts * self.positions
        rates = ", ".join(f"{n / self.drafts:.3f}" for n in self.accepted_per_position)
        return SPEC_DECODE_LINE % (
            1 + self.accepted / self.drafts,
            self.accepted / elapsed,
            drafted / elapsed,
            self.accepted,
            drafted,
            rates,
            100 * self.accepted / drafted,
        )


class LiveKnobs:
    """The container's `lab/live.json`, re-read when it changes (looked at every
    LIVE_RECHECK_SECONDS at most): knobs the lab turns on a running server."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.acceptance_scale = 1.0
        self._seen: int | None = None
        self._checked = -LIVE_RECHECK_SECONDS

    def scale(self) -> float:
        now = time.monotonic()
        if now - self._checked >= LIVE_RECHECK_SECONDS:
            self._checked = now
            try:
                changed = self.path.stat().st_mtime_ns
            except FileNotFoundError:
                changed = None
            if changed != self._seen:
                self._seen = changed
                knobs = read_json(self.path) if changed is not None else {}
                self.acceptance_scale = float(knobs.get("acceptance_scale", 1.0))
        return self.acceptance_scale


class Engine:
    """Generates tokens at a simulated rate, drafting and counting as vLLM's engine does."""

    def __init__(
        self,
        metrics: Metrics,
        drafting: Drafting | None,
        seed: int,
        tokens_per_second: float = DEFAULT_TOKENS_PER_SECOND,
        live: LiveKnobs | None = None,
    ) -> None:
        self.metrics = metrics
        self.drafting = drafting
        self.live = live
        self.step_seconds = 1 / tokens_per_second
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.running = 0
        self.interval = self._new_interval()

    def _new_interval(self) -> Interval:
        return Interval(self.drafting.num_speculative_tokens if self.drafting else 0)

    def take_interval(self) -> tuple[Interval, int]:
        """The interval just ended and the requests running now."""
        with self.lock:
            ended, self.interval = self.interval, self._new_interval()
            return ended, self.running

    def generate(self, prompt_tokens: int, max_tokens: int) -> None:
        """Produce `max_tokens` tokens, one engine step per `step_seconds`."""
        with self.lock:
            self.running += 1
            self.interval.prompt_tokens += prompt_tokens
            multiplier = request_multiplier(self.rng)
        self.metrics.running.inc()
        self.metrics.prompt_tokens.inc(prompt_tokens)
        started, produced, steps = time.monotonic(), 0, 0
        try:
            while produced < max_tokens:
                step = min(self._step(prompt_tokens + produced, multiplier), max_tokens - produced)
                produced, steps = produced + step, steps + 1
                self.metrics.generation_tokens.inc(step)
                with self.lock:
                    self.interval.generation_tokens += step
                time.sleep(max(started + steps * self.step_seconds - time.monotonic(), 0))
        finally:
            self.metrics.running.dec()
            with self.lock:
                self.running -= 1

    def _step(self, context_tokens: int, multiplier: float) -> int:
        """Tokens one engine step yields: a draft's accepted tokens plus the bonus token."""
        if self.drafting is None:
            return 1
        k = self.drafting.num_speculative_tokens
        profile = self.drafting.profile_at(context_tokens)
        scale = self.live.scale() if self.live else 1.0
        if scale != 1.0:
            profile = [share * scale for share in profile]
        metrics = self.metrics
        with self.lock:  # one draft is one update: a scrape never sees half of it
            accepted = sample_accepted(profile, k, multiplier, self.rng)
            self.interval.drafts += 1
            self.interval.accepted += accepted
            for position in range(accepted):
                self.interval.accepted_per_position[position] += 1
            metrics.drafts.inc()
            metrics.draft_tokens.inc(k)
            metrics.accepted_tokens.inc(accepted)
            for position in range(accepted):
                metrics.accepted_per_position[position].inc()
        return accepted + 1


@dataclass
class App:
    """What the HTTP handlers serve."""

    model_name: str
    root: str
    max_model_len: int | None
    engine: Engine
    faults: Faults
    health_503_while_warming: bool = False
    warm_until: float = 0.0
    """Monotonic time until which /health answers 503 (set when the port starts listening)."""


def count_tokens(value: object) -> int:
    """Rough prompt length: words of text, items of token lists."""
    if isinstance(value, str):
        return max(len(value.split()), 1)
    if isinstance(value, list):
        return sum(count_tokens(item) for item in value)
    if isinstance(value, dict):
        return count_tokens(value.get("content", ""))
    return 1


def filler(tokens: int) -> str:
    return " ".join(FILLER[i % len(FILLER)] for i in range(tokens))


def error_body(message: str, kind: str, code: int) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class RequestError(Exception):
    """A request vLLM would answer with an error response."""

    def __init__(self, message: str, kind: str = "BadRequestError", code: int = 400) -> None:
        super().__init__(message)
        self.body, self.code = error_body(message, kind, code), code


def completion_body(app: App, request: dict, chat: bool) -> dict:
    """Validate an OpenAI request, generate, and answer in vLLM's response shape."""
    model = request.get("model", app.model_name)
    if model != app.model_name:
        raise RequestError(f"The model `{model}` does not exist.", "NotFoundError", 404)
    if request.get("stream"):
        raise RequestError("the lab's vLLM does not stream responses")
    max_tokens = request.get("max_tokens") or request.get("max_completion_tokens")
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError(f"max_tokens must be at least 1, got {max_tokens}.")
    prompt_tokens = count_tokens(request.get("messages" if chat else "prompt", ""))
    app.engine.generate(prompt_tokens, max_tokens)
    text = filler(max_tokens)
    choice: dict = {"index": 0, "logprobs": None, "finish_reason": "length", "stop_reason": None}
    if chat:
        choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
    else:
        choice["text"] = text
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": app.model_name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + max_tokens,
            "completion_tokens": max_tokens,
        },
    }


GARBAGE_METRICS = b'vllm:spec_decode_num_drafts_total{model_name="\n\x00 not } prometheus {{\n'


class Handler(BaseHTTPRequestHandler):
    """vLLM's routes; keep-alive HTTP/1.1 with a length on every response."""

    protocol_version = "HTTP/1.1"
    server: LabHTTPServer

    def do_GET(self) -> None:
        app = self.server.app
        if self.path == "/health":
            status = 503 if time.monotonic() < app.warm_until else 200
            self._send(status, b"", "application/json", app.faults.drip_health_seconds)
        elif self.path == "/v1/models":
            created = int(time.time())
            model = {
                "id": app.model_name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": app.root,
                "parent": None,
                "max_model_len": app.max_model_len,
            }
            self._send_json(200, {"object": "list", "data": [model]})
        elif self.path == "/metrics":
            if app.faults.garbage_metrics:
                self._send(200, GARBAGE_METRICS, CONTENT_TYPE_LATEST)
            else:  # negotiated as prometheus-client's ASGI app (vLLM's /metrics) does
                encode, content_type = choose_encoder(self.headers.get("Accept", ""))
                with app.engine.lock:
                    exposition = encode(app.engine.metrics.registry)
                self._send(200, exposition, content_type, app.faults.drip_metrics_seconds)
        else:
            self._send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        routes = {"/v1/completions": False, "/v1/chat/completions": True}
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path not in routes:
            self._send_json(404, {"detail": "Not Found"})
            return
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise RequestError("the request body must be a JSON object")
            self._send_json(200, completion_body(self.server.app, request, routes[self.path]))
        except json.JSONDecodeError as error:
            self._send_json(400, error_body(f"invalid JSON: {error}", "BadRequestError", 400))
        except RequestError as error:
            self._send_json(error.code, error.body)

    def _send_json(self, status: int, body: dict) -> None:
        self._send(status, json.dumps(body).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str, drip: float | None = None) -> None:
        if drip is not None:
            self._drip(status, body, content_type, drip)
            return
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _drip(self, status: int, body: bytes, content_type: str, every: float) -> None:
        """The whole response one byte at a time, `every` seconds apart (a wedged server)."""
        self.log_request(status)
        head = (
            f"{self.protocol_version} {status} {self.responses[status][0]}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        for byte in head.encode() + body:
            self.wfile.write(bytes([byte]))
            time.sleep(every)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Uvicorn's access line, as in a vLLM log."""
        host, port = self.client_address[:2]
        phrase = self.responses.get(code, ("", ""))[0] if isinstance(code, int) else ""
        print(f'INFO:     {host}:{port} - "{self.requestline}" {code} {phrase}', flush=True)


class LabHTTPServer(ThreadingHTTPServer):
    """Bound at construction, listening only once `server_activate` is called."""

    allow_reuse_address = True
    daemon_threads = True
    app: App


def log_stats(engine: Engine, every: float, stop: threading.Event) -> None:
    """vLLM's periodic stats lines, while there is traffic."""
    while not stop.wait(every):
        interval, running = engine.take_interval()
        for source, message in interval.log_lines(running):
            log("INFO", source, message)


def install_signal_handlers(stop: threading.Event, ignore_sigterm: bool) -> None:
    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore_sigterm else request_stop)
    signal.signal(signal.SIGINT, request_stop)


def build_app(
    args: argparse.Namespace, container: ContainerPaths, faults: Faults, capabilities: Capabilities
) -> App:
    """Read the target and drafter as vLLM does at start-up; any problem raises."""
    config = read_json(Path(args.model_tag) / "config.json")
    log("INFO", "model.py:547", f"Resolved architecture: {config['architectures'][0]}")
    drafting = None
    if args.speculative_config is not None:
        speculative = parse_speculative_config(args.speculative_config, capabilities)
        drafting = load_drafting(
            speculative, container, capabilities, config, faults.swa_as_full_attention
        )
    model_name = (args.served_model_name or [args.model_tag])[0]
    metrics = Metrics(model_name, drafting, not faults.drop_spec_decode)
    seed = args.port if args.seed is None else args.seed
    engine = Engine(metrics, drafting, seed, args.tokens_per_second, LiveKnobs(container.live))
    max_model_len = args.max_model_len or text_config(config).get("max_position_embeddings")
    warming = capabilities.row.health_503_while_warming
    return App(model_name, args.model_tag, max_model_len, engine, faults, warming)


def register(args: argparse.Namespace, container: ContainerPaths) -> Path:
    """Take GPU memory and record it in `lab/servers/<pid>.json` for nvidia-smi."""
    gpu_memory = take_gpu_memory(container, args.tensor_parallel_size, args.gpu_memory_utilization)
    record = container.server_record(os.getpid())
    started = time.time()
    write_json_atomic(
        record,
        {"pid": os.getpid(), "port": args.port, "gpu_memory_mib": gpu_memory, "started": started},
    )
    return record


def serve(args: argparse.Namespace, container: ContainerPaths, stop: threading.Event) -> None:
    """Everything after the flags; the port and the record are released however it ends."""
    faults = read_faults(container)
    install_signal_handlers(stop, faults.ignore_sigterm)
    capabilities = capabilities_for(claimed_version())
    log("INFO", "api_server.py:1839", f"vLLM API server version {capabilities.version}")
    defaults = vars(parse_args(["serve", args.model_tag]))
    changed = {name: value for name, value in vars(args).items() if defaults[name] != value}
    log("INFO", "utils.py:233", f"non-default args: {changed}")
    require_loopback(args.host)
    httpd = LabHTTPServer((args.host, args.port), Handler, bind_and_activate=False)
    try:
        httpd.server_bind()
        httpd.app = build_app(args, container, faults, capabilities)
        record = register(args, container)
        try:
            run_server(httpd, args, faults, stop)
        finally:
            record.unlink(missing_ok=True)
    finally:
        httpd.server_close()


def run_server(
    httpd: LabHTTPServer, args: argparse.Namespace, faults: Faults, stop: threading.Event
) -> None:
    """Load (refusing connections), listen, serve until stopped or the crash fault fires."""
    log("INFO", "gpu_model_runner.py:2602", f"Starting to load model {args.model_tag}...")
    started = time.monotonic()
    load_seconds = args.load_seconds if faults.load_seconds is None else faults.load_seconds
    if stop.wait(None if faults.hang_while_loading else load_seconds):
        return
    took = time.monotonic() - started
    log("INFO", "default_loader.py:267", f"Loading weights took {took:.2f} seconds")
    if httpd.app.health_503_while_warming:
        httpd.app.warm_until = time.monotonic() + WARMUP_SECONDS
    httpd.server_activate()
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    every = float(os.environ.get(STATS_INTERVAL_ENV, DEFAULT_STATS_INTERVAL))
    threading.Thread(target=log_stats, args=(httpd.app.engine, every, stop), daemon=True).start()
    log(
        "INFO",
        "api_server.py:1634",
        f"Starting vLLM API server 0 on http://{args.host}:{args.port}",
    )
    print("INFO:     Application startup complete.", flush=True)
    crash = faults.crash_after_ready_seconds
    if crash is not None:  # counted from ready: the warm-up's end
        crash += max(httpd.app.warm_until - time.monotonic(), 0.0)
    try:
        if not stop.wait(crash):
            log("ERROR", "core.py:710", "EngineCore encountered a fatal error.")
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        log("INFO", "launcher.py:101", "Shutting down FastAPI HTTP server.")
    finally:
        httpd.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    serve(args, ContainerPaths(Path(os.environ[CONTAINER_ENV])), threading.Event())
    print(f"INFO:     Finished server process [{os.getpid()}]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
