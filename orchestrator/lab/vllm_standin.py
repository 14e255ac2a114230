"""The lab's `vllm`: a real process that takes `vllm serve`'s flags and answers like it.

Lifecycle of one server (`ORCH_LAB_CONTAINER` names its container's directory):
parse the flags (an unknown flag is a usage error, exit 2) -> read the fault
knobs -> bind the port -> read the target, speculative and drafter configs
(any problem raises: a Python traceback and exit 1, as vLLM does) -> take GPU
memory, recorded in `lab/servers/<pid>.json` -> "load weights" for
`--load-seconds` with the port bound but not listening (connections refused)
-> listen and serve the OpenAI routes, `/health` (200) and `/metrics` -> on SIGTERM
stop serving, drop the record, exit 0. When the engine dies (the crash fault),
/health answers 503 and requests 500 until the next watchdog tick, then exit 0.

Drafts are accepted according to `acceptance.py`: the deployed drafter config
is compared with the published one in `lab/truth/` and with its `fc.weight`,
and, when sliding layers run as full attention, with the request's context;
a request sampling at a temperature above 0 keeps less (its temperature, else
the target's generation_config.json default, else 1.0).
Requests in flight share engine steps. A step (one draft and its verification,
or one token without a drafter) costs what `step_cost.py` says for the tokens it
verifies and the positions it drafts across the requests running, in units of
1 / `--tokens-per-second`: the target's decode speed with one stream and no
speculation. The profile of costs is `--step-costs` (`speed_costs.yaml`).
A streamed request (`"stream": true`) gets server-sent events as vLLM sends them: a
chunk of each engine step's tokens when the step ends, so a client times per-stream
decode speed from their arrival.

The server behaves like the vLLM release it claims (`ORCH_LAB_VLLM_VERSION`,
default the newest the lab knows), from the lab's own data read from the
release's wheel (`releases.py`, `vllm_releases.yaml`), never from orch's tables:
its methods and SpeculativeConfig fields, pydantic's errors for others, how it
reads VLLM_USE_V2_MODEL_RUNNER, what it does with a DFlash drafter mixing
sliding and full layers or lacking a window, the zero lm_head of its V2 runner,
its flags (the `swa_as_full_attention` fault knob runs sliding layers as full
attention on any release; `lab/live.json`'s `acceptance_scale`, re-read while
serving, scales every position's acceptance: `orch lab acceptance`). Imports stay
light: an idle server must stay small.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import ipaddress
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from orchestrator.lab import dflash_reading, step_cost
from orchestrator.lab.acceptance import (
    acceptance_profile,
    collapsed_past_window,
    draft_model_profile,
    eagle3_profile,
    mtp_profile,
    ngram_profile,
    request_multiplier,
    sample_accepted,
    sampling_factor,
    zero_head_profile,
)
from orchestrator.lab.paths import (
    CONTAINER_ENV,
    DEFAULT_TOKENS_PER_SECOND,
    TOKENS_PER_SECOND_ENV,
    VLLM_VERSION_ENV,
    ContainerPaths,
    read_gpus,
    server_records,
    write_json_atomic,
)
from orchestrator.lab.releases import Release, default_release, release

FAULTS_ENV = "ORCH_LAB_FAULTS"
LOAD_SECONDS_ENV = "ORCH_LAB_LOAD_SECONDS"
STATS_INTERVAL_ENV = "VLLM_LOG_STATS_INTERVAL"
DEFAULT_LOAD_SECONDS = 2.0
DEFAULT_STATS_INTERVAL = 5.0
LIVE_RECHECK_SECONDS = 0.5
WATCHDOG_SECONDS = 5.0
"""The API server's check for a dead engine (VLLM_WATCHDOG_TIME_S, launcher.py:319 in 0.32.0)."""
GENERATION_CONFIG = "generation_config.json"
SAMPLING_DEFAULTS = ("temperature", "top_p", "top_k")
DEFAULT_MAX_TOKENS = 16
FILLER = ("the", "draft", "tokens", "were", "verified", "by", "the", "target", "in", "one", "pass")
SPEC_DECODE_LINE = (
    "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
    "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
    "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
)


def say(line: str) -> None:
    """One line of the server's log. A line that cannot be written (its disk full) is
    lost and the server serves on, as vLLM's, which logs through `logging`: a failed
    write goes to Handler.handleError, which drops the OSError of its own report to
    stderr (CPython 3.11.7 Lib/logging/__init__.py:1109-1118, :1016-1059)."""
    with contextlib.suppress(OSError):
        print(line, flush=True)


def log(level: str, source: str, message: str) -> None:
    """One line in vLLM's format: `INFO 12-02 11:40:01 [api_server.py:1839] message`."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    say(f"{level} {stamp} [{source}] {message}")


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def claimed_version() -> str:
    """The vLLM version this lab container's stand-in claims to be."""
    return os.environ.get(VLLM_VERSION_ENV) or default_release()


def json_value(text: str) -> dict:
    """A JSON flag, refused with vLLM's own usage error (exit 2) when it does not parse
    (FlexibleArgumentParser; seen on the real 0.32.0 server)."""
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Value {text} cannot be converted to {json.loads!r}."
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"Value {text} cannot be converted to {json.loads!r}.")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """`vllm serve TARGET [flags]`; an unknown flag is argparse's usage error, exit 2."""
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("--version", action="version", version=claimed_version())
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", usage="vllm serve [model_tag] [options]")
    serve.add_argument("model_tag")
    serve.add_argument("--speculative-config", "-sc", type=json_value)
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
    serve.add_argument("--generation-config", default="auto")
    serve.add_argument("--override-generation-config")
    serve.add_argument("--api-key", nargs="+")
    if release(claimed_version()).per_request_spec_decode_metrics:
        serve.add_argument(
            "--per-request-spec-decode-metrics",
            choices=("none", "summary", "detailed"),
            default="none",
            help="adds each response's metrics.speculative_decoding, in the release's shape",
        )
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
        help="lab only: decode speed of one stream without speculation",
    )
    serve.add_argument(
        "--step-costs",
        choices=list(step_cost.profiles()),
        default=os.environ.get(step_cost.PROFILE_ENV) or step_cost.default_profile(),
        help="lab only: what a step costs by the tokens it verifies and drafts",
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
    fail_completions: bool = False
    """Every completion runs (its drafts are counted) and then answers HTTP 500."""


def read_faults(container: ContainerPaths) -> Faults:
    """The file's knobs, overridden by the environment's; an unknown knob raises."""
    knobs = json.loads(container.faults.read_text()) if container.faults.exists() else {}
    knobs.update(json.loads(os.environ.get(FAULTS_ENV) or "{}"))
    return Faults(**knobs)


class SpeculativeConfigError(ValueError):
    """Raised with pydantic's wording and name, as vLLM's own config validation reads:
    the traceback's last line is `pydantic_core._pydantic_core.ValidationError: ...`."""


SpeculativeConfigError.__module__, SpeculativeConfigError.__qualname__ = (
    "pydantic_core._pydantic_core",
    "ValidationError",
)
NO_MODEL_CONFIG = (
    "Invalid repository ID or local directory specified: '{model}'.\n"
    "Please verify the following requirements:\n"
    "1. Provide a valid Hugging Face repository ID.\n"
    "2. Specify a local directory that contains a recognized configuration file.\n"
    "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
    "   - For Mistral models: ensure the presence of a 'params.json'.\n"
)
"""A drafter dir without config.json (0.32.0 `transformers_utils/config.py:847-860`)."""
PYDANTIC_ERRORS = "https://errors.pydantic.dev/2.14/v/"
"""pydantic's link under each error (2.14: the real 0.32.0 server's venv here)."""


def validation_error(errors: list[tuple[str, str, str, Any]]) -> SpeculativeConfigError:
    """pydantic's text for (field, message, type, input) errors of SpeculativeConfig; a
    model-level error has no field line."""
    lines = [
        f"{len(errors)} validation error{'s' if len(errors) > 1 else ''} for SpeculativeConfig"
    ]
    for field_name, message, kind, value in errors:
        lines += [
            *([field_name] if field_name else []),
            f"  {message} [type={kind}, input_value={value!r}, input_type={type(value).__name__}]",
            f"    For further information visit {PYDANTIC_ERRORS}{kind}",
        ]
    return SpeculativeConfigError("\n".join(lines))


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


V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
DRAFTER_DIR_METHODS = ("dflash", "eagle3", "draft_model")
METHODS = (*DRAFTER_DIR_METHODS, "mtp", "ngram")
"""The methods the lab drafts with; the first ones load a drafter dir (`model`)."""


def vllm_error(text: str) -> Exception:
    """The exception a release's data names (`NotImplementedError: ...`), to raise as is."""
    kind, _, message = text.partition(": ")
    classes: dict[str, type[Exception]] = {
        "NotImplementedError": NotImplementedError,
        "ValueError": ValueError,
    }
    return classes[kind](message)


def runner_env(claimed: Release) -> bool | None:
    """VLLM_USE_V2_MODEL_RUNNER as the release reads it at start (None: unset); a value
    it refuses raises its error."""
    value = os.environ.get(V2_RUNNER_ENV)
    if value is None:
        return None
    step = claimed.fact("runner_env")
    if step.value == "exactly_1":
        if value != "1":
            raise vllm_error(str(step.error).format(value=value))
        log("WARNING", "interface.py:1487", str(step.warning))
        return True
    try:
        return bool(int(value))
    except ValueError:
        raise vllm_error(str(step.error).format(value=value)) from None


def refuse_forced_v2_runner(method: str, claimed: Release) -> None:
    """The engine config's check when VLLM_USE_V2_MODEL_RUNNER forces the V2 runner
    (a non-zero integer): a method that runner lacks is the release's ValueError at
    start, before any model loads (vllm_releases.yaml, v2_refused_methods)."""
    refused = claimed.fact("v2_refused_methods").value.get(method)
    if refused and runner_env(claimed):
        raise vllm_error(refused)


def parse_speculative_config(config: dict, claimed: Release) -> dict:
    """SpeculativeConfig's validation as the release runs it: required fields, no key it
    lacks, a method it knows; then the methods the lab simulates."""
    needed: tuple[str, ...] = ("method", "num_speculative_tokens")
    if config.get("method") in DRAFTER_DIR_METHODS:
        needed += ("model",)
    errors: list[tuple[str, str, str, Any]] = [
        (key, "Field required", "missing", config) for key in needed if key not in config
    ]
    fields = claimed.fact("speculative_config_fields").value
    errors += [
        (key, "Unexpected keyword argument", "unexpected_keyword_argument", value)
        for key, value in config.items()
        if key not in fields
    ]
    method = config.get("method")
    if "method" in config and method not in claimed.methods:
        known = ", ".join(repr(m) for m in claimed.methods[:-1]) + f" or {claimed.methods[-1]!r}"
        errors.append(("method", f"Input should be {known}", "literal_error", method))
    if errors:
        raise validation_error(errors)
    model = config.get("model")
    if model is not None and not (Path(model) / "config.json").is_file():
        raise validation_error(
            [("", f"Value error, {NO_MODEL_CONFIG.format(model=model)}", "value_error", config)]
        )
    if method not in METHODS:
        known = ", ".join(sorted(METHODS))
        raise ValueError(f"the lab's vLLM drafts with methods {known} only, not {method!r}")
    return config


def fc_in_features(weights: Path) -> int | None:
    """Second dimension of `fc.weight`, read from the safetensors header (None if absent):
    8 bytes of little-endian length, then that much JSON."""
    with weights.open("rb") as stream:
        (length,) = struct.unpack("<Q", stream.read(8))
        header = json.loads(stream.read(length))
    for name, tensor in header.items():
        if name == "fc.weight" or name.endswith(".fc.weight"):
            return int(tensor["shape"][1])
    return None


def same_weights(speculative: dict, target_dir: Path | None) -> bool:
    """The drafter's weights file is the target's own (a release links to it)."""
    drafter, weights = Path(speculative["model"]) / "model.safetensors", "model.safetensors"
    try:
        return target_dir is not None and drafter.samefile(target_dir / weights)
    except OSError:
        return False


def load_drafting(
    speculative: dict,
    container: ContainerPaths,
    claimed: Release,
    target: dict,
    forced_swa_as_full_attention: bool = False,
    target_dir: Path | None = None,
) -> Drafting:
    """The acceptance model of the method: DFlash and EAGLE-3 read their drafter dir, a
    draft model is compared with the target's weights. `forced_swa_as_full_attention` is
    the lab's fault knob."""
    steps = int(speculative["num_speculative_tokens"])
    if speculative["method"] == "draft_model":
        return Drafting(steps, draft_model_profile(same_weights(speculative, target_dir), steps))
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
    return load_dflash(speculative, container, claimed, target, forced_swa_as_full_attention)


def load_dflash(
    speculative: dict,
    container: ContainerPaths,
    claimed: Release,
    target: dict,
    forced_swa_as_full_attention: bool = False,
) -> Drafting:
    """Read the drafter as vLLM `claimed.version` would, then look up the published
    config of its weights. `forced_swa_as_full_attention` is the lab's fault knob."""
    drafter = Path(speculative["model"])
    deployed = read_json(drafter / "config.json")
    runner = runner_env(claimed)
    swa_as_full_attention = dflash_reading.is_mixed(deployed) and mixed_layers_run_as_full(
        claimed, runner
    )
    windowless = claimed.fact("windowless_dflash_drafter")
    if windowless.error and dflash_reading.windowless(deployed):
        raise vllm_error(windowless.error)
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
    zero_head = claimed.fact("zero_head_on_v2_for_conditional_generation").value
    if zero_head and runner and dflash_reading.conditional_generation(target):
        profile = zero_head_profile(len(profile))
    k = int(speculative["num_speculative_tokens"])
    return Drafting(
        k,
        profile,
        sliding_window=(
            dflash_reading.trained_attention(truth)[1] if truth else dflash_reading.window(deployed)
        ),
        swa_as_full_attention=swa_as_full_attention or forced_swa_as_full_attention,
    )


def mixed_layers_run_as_full(claimed: Release, runner: bool | None) -> bool:
    """How the release treats a drafter mixing sliding and full attention layers, given
    the runner variable (None: unset): its error when it refuses or the runner it needs
    is forced off, True when it runs the sliding layers as full attention."""
    step = claimed.fact("mixed_dflash_drafter")
    refused = step.value == "refused"
    v1_forced = step.value in ("v2_runner", "v1_refused") and runner is False
    if (refused or v1_forced) and step.error:
        raise vllm_error(step.error)
    return bool(step.value == "full_attention")


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


CLIENT_CHECK_SECONDS = 0.05
"""How often a request being generated looks whether its client is still there."""


@dataclass
class RequestDrafts:
    """One request's verify steps, as vLLM 0.29.0 on keeps them for
    `--per-request-spec-decode-metrics` (RequestSpecDecodeMetrics,
    `vllm/v1/metrics/stats.py:300-375` in 0.29.0): a dense histogram of accepted
    draft tokens per step, the bonus token excluded."""

    num_spec_tokens: int
    histogram: list[int] = field(default_factory=list)
    num_draft_tokens: int = 0
    per_step_accepted: list[int] = field(default_factory=list)
    per_step_drafted: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.histogram = [0] * (self.num_spec_tokens + 1)

    def observe(self, drafted: int, accepted: int) -> None:
        self.histogram[accepted] += 1
        self.num_draft_tokens += drafted
        self.per_step_accepted.append(accepted)
        self.per_step_drafted.append(drafted)

    def speculative_decoding(self, level: str) -> dict[str, Any]:
        """The response's `speculative_decoding`, as RequestSpecDecodeMetrics.to_dict
        (same file) gives it; the per-step
        arrays only at `detailed`, null otherwise: the response model's fields default to
        None and vLLM's responses keep null fields (`generate/base/protocol.py:50-51`)."""
        steps = sum(self.histogram)
        accepted = sum(j * count for j, count in enumerate(self.histogram))
        figures: dict[str, Any] = {
            "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / self.num_draft_tokens
            if self.num_draft_tokens
            else 0.0,
            "acceptance_histogram": list(self.histogram),
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": self.num_draft_tokens,
            "num_spec_tokens": self.num_spec_tokens,
        }
        detailed = level == "detailed" and self.per_step_accepted
        figures["per_step_accepted"] = list(self.per_step_accepted) if detailed else None
        figures["per_step_drafted"] = list(self.per_step_drafted) if detailed else None
        return figures


PER_REQUEST_TIMING = (
    "time_to_first_token_ms",
    "generation_time_ms",
    "queue_time_ms",
    "mean_itl_ms",
    "tokens_per_second",
)
"""PerRequestMetrics' timing fields, null unless `--enable-per-request-metrics`
(`entrypoints/generate/base/protocol.py:55-62` in 0.29.0)."""


class Engine:
    """Generates tokens at a simulated rate, drafting and counting as vLLM's engine does."""

    def __init__(
        self,
        metrics: Metrics,
        drafting: Drafting | None,
        seed: int,
        costs: step_cost.StepCosts,
        tokens_per_second: float = DEFAULT_TOKENS_PER_SECOND,
        live: LiveKnobs | None = None,
    ) -> None:
        self.metrics = metrics
        self.drafting = drafting
        self.live = live
        self.step_seconds = 1 / tokens_per_second
        self.costs = costs
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

    def generate(
        self,
        prompt_tokens: int,
        max_tokens: int,
        sampling: float = 1.0,
        client_gone: Callable[[], bool] = lambda: False,
        on_step: Callable[[int, int], None] = lambda produced, step: None,
    ) -> RequestDrafts | None:
        """Produce `max_tokens` tokens, one engine step per `step_seconds`; `sampling` is
        the share of greedy acceptance left at the request's temperature. `on_step`
        hears each step's tokens (those before it, those it made) when the step ends.
        Returns the request's own drafts, or None when `client_gone` said the client
        left: the request is aborted then, as vLLM's `with_cancellation` does."""
        with self.lock:
            self.running += 1
            self.interval.prompt_tokens += prompt_tokens
            multiplier = request_multiplier(self.rng) * sampling
        self.metrics.running.inc()
        self.metrics.prompt_tokens.inc(prompt_tokens)
        k = self.drafting.num_speculative_tokens if self.drafting else 0
        drafts = RequestDrafts(k)
        due, produced, looked = time.monotonic(), 0, time.monotonic()
        try:
            while produced < max_tokens:
                now = time.monotonic()
                if now - looked >= CLIENT_CHECK_SECONDS:
                    looked = now
                    if client_gone():
                        return None
                step = self._step(prompt_tokens + produced, multiplier, drafts)
                step = min(step, max_tokens - produced)
                self.metrics.generation_tokens.inc(step)
                with self.lock:
                    self.interval.generation_tokens += step
                    streams = self.running
                due += self.step_seconds * self.costs.units(streams, k)
                time.sleep(max(due - time.monotonic(), 0))
                on_step(produced, step)
                produced += step
        finally:
            self.metrics.running.dec()
            with self.lock:
                self.running -= 1
        return drafts

    def _step(self, context_tokens: int, multiplier: float, drafts: RequestDrafts) -> int:
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
        drafts.observe(k, accepted)
        return accepted + 1


@dataclass
class App:
    """What the HTTP handlers serve."""

    model_name: str
    root: str
    max_model_len: int | None
    engine: Engine
    faults: Faults
    default_sampling: dict = field(default_factory=dict)
    """Sampling for fields a request leaves unset (the target's generation_config.json)."""
    engine_dead: bool = False
    """Set when the engine died: /health answers 503, requests 500, until the watchdog stops."""
    api_tokens: list[bytes] = field(default_factory=list)
    """SHA-256 of each key a request under GUARDED_PREFIX must present (none: open)."""
    fingerprint: str | None = None
    """The responses' `system_fingerprint` (see `system_fingerprint`)."""
    per_request_metrics: str = "none"
    """`--per-request-spec-decode-metrics`: `summary` or `detailed` add each response's
    `metrics.speculative_decoding` (single-sequence requests, with drafting)."""


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


def error_body(message: str, kind: str, code: int, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class RequestError(Exception):
    """A request vLLM would answer with an error response."""

    def __init__(
        self,
        message: str,
        kind: str = "BadRequestError",
        code: int = 400,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.body, self.code = error_body(message, kind, code, param), code


def sampling_error(message: str, parameter: str, value: object) -> RequestError:
    """SamplingParams' VLLMValidationError as the server answers it: its message, then
    `(parameter=..., value=...)` (0.32.0 `vllm/exceptions.py:49-56`), `param` set."""
    return RequestError(f"{message} (parameter={parameter}, value={value})", param=parameter)


def invalid_json(error: json.JSONDecodeError) -> dict:
    """FastAPI's `json_invalid` as vLLM's validation handler words it (0.32.0
    `vllm/entrypoints/serve/exception_handling/handlers/validation.py:149-195`, the same
    bytes from 0.30.0 to 0.34.0): the error's dict with its input summarised."""
    where = f"body.{error.pos}"
    detail = {
        "type": "json_invalid",
        "loc": where,
        "msg": "JSON decode error",
        "input": "<dict of 0 items>",
        "ctx": {"error": error.msg},
    }
    return error_body(f"1 validation error:\n  {detail}", "Bad Request", 400, where)


class ClientGone(Exception):
    """The client closed its connection while its request was generated: aborted."""


@dataclass(frozen=True)
class Asked:
    """A valid completion request: what the engine is asked for and how to answer."""

    chat: bool
    prompt_tokens: int
    max_tokens: int
    sampling: float
    """The share of greedy acceptance left at the request's temperature."""
    single: bool
    """n is 1: vLLM attributes per-request figures only then."""
    stream: bool
    include_usage: bool


def read_request(app: App, request: dict, chat: bool) -> Asked:
    """Validate an OpenAI request as vLLM does before it generates anything."""
    model = request.get("model", app.model_name)
    if model != app.model_name:
        unknown = release(claimed_version()).fact("unknown_model_error").value
        message = str(unknown).format(model=model, served=app.model_name)
        raise RequestError(message, "NotFoundError", 404, "model")
    temperature = request.get("temperature")
    if temperature is None:  # user -> server default -> OpenAI default
        temperature = app.default_sampling.get("temperature", 1.0)
    if not isinstance(temperature, (int, float)) or temperature < 0:
        value = float(temperature) if isinstance(temperature, (int, float)) else temperature
        message = f"temperature must be non-negative, got {value}."
        raise sampling_error(message, "temperature", value)
    highest = release(claimed_version()).fact("temperature_max").value
    if highest is not None and temperature > highest:
        message = f"temperature must be in [0, {highest:g}], got {float(temperature)}."
        raise sampling_error(message, "temperature", float(temperature))
    max_tokens = request.get("max_tokens")
    if max_tokens is None:
        max_tokens = request.get("max_completion_tokens")
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if not isinstance(max_tokens, int) or max_tokens < 1:
        message = f"max_tokens must be at least 1, got {max_tokens}."
        raise sampling_error(message, "max_tokens", max_tokens)
    options = request.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("stream_options must be an object")
    return Asked(
        chat=chat,
        prompt_tokens=count_tokens(request.get("messages" if chat else "prompt", "")),
        max_tokens=max_tokens,
        sampling=sampling_factor(float(temperature)),
        single=(request.get("n") or 1) == 1,
        stream=bool(request.get("stream")),
        include_usage=bool(options.get("include_usage")),
    )


def completion_body(
    app: App, asked: Asked, client_gone: Callable[[], bool] = lambda: False
) -> dict:
    """Generate a whole response and answer in vLLM's response shape."""
    drafts = app.engine.generate(asked.prompt_tokens, asked.max_tokens, asked.sampling, client_gone)
    if drafts is None:
        raise ClientGone()
    text = filler(asked.max_tokens)
    body = response_body(app, asked.chat, text, asked.prompt_tokens, asked.max_tokens)
    body["metrics"] = request_metrics(app, asked, drafts)
    return body


def request_metrics(app: App, asked: Asked, drafts: RequestDrafts) -> dict | None:
    """`metrics` of a response: the per-request figures, None when vLLM leaves them out
    (n > 1: `completion/serving.py:620-634` in 0.29.0)."""
    if app.per_request_metrics == "none" or app.engine.drafting is None or not asked.single:
        return None
    metrics: dict[str, Any] = dict.fromkeys(PER_REQUEST_TIMING)
    metrics["speculative_decoding"] = drafts.speculative_decoding(app.per_request_metrics)
    return metrics


@dataclass(frozen=True)
class StreamHead:
    """What every chunk of one streamed response repeats, and the fingerprint its last
    token chunk carries (None: the usage chunk carries it, or the release has none)."""

    id: str
    created: int
    model: str
    chat: bool
    terminal_fingerprint: str | None

    @classmethod
    def start(cls, app: App, asked: Asked) -> StreamHead:
        prefix = "chatcmpl" if asked.chat else "cmpl"
        stamped = None if asked.include_usage else app.fingerprint
        return cls(
            f"{prefix}-{uuid.uuid4().hex}", int(time.time()), app.model_name, asked.chat, stamped
        )

    def envelope(self) -> dict:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}


def role_chunk(head: StreamHead) -> dict:
    """A chat stream's first chunk, the role with empty content, and the prompt's token
    ids and text, set (to None unless asked for) on this chunk alone, so dumped
    `exclude_unset` as nulls (0.32.0 `entrypoints/openai/chat_completion/serving.py:
    550-589`)."""
    choice = {"index": 0, "delta": {"role": "assistant", "content": ""}}
    return {
        **head.envelope(),
        "choices": [choice | {"logprobs": None, "finish_reason": None}],
        "prompt_token_ids": None,
        "prompt_text": None,
    }


def token_chunk(head: StreamHead, text: str, finished: bool) -> dict:
    """One engine step's tokens, dumped `exclude_unset` so only the fields the server
    set appear: a completion's choice sets all its fields (0.32.0
    `entrypoints/openai/completion/serving.py:404-443`), a chat's sets `stop_reason`
    only on its last chunk (`chat_completion/serving.py:752-830`). The finish reason is
    `length`: the stand-in stops at max_tokens. The last chunk carries the
    `system_fingerprint` when no usage chunk follows (`completion/serving.py:425-432`,
    `chat_completion/serving.py:803-811`)."""
    finish = "length" if finished else None
    if head.chat:
        choice: dict = {"index": 0, "delta": {"content": text}, "logprobs": None}
        choice["finish_reason"] = finish
        if finished:
            choice["stop_reason"] = None
        choice["token_ids"] = None
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        choice |= {"stop_reason": None, "prompt_token_ids": None, "token_ids": None}
    chunk = {**head.envelope(), "choices": [choice]}
    if finished and head.terminal_fingerprint is not None:
        chunk["system_fingerprint"] = head.terminal_fingerprint
    return chunk


def usage_chunk(app: App, head: StreamHead, asked: Asked, metrics: dict | None) -> dict:
    """The last chunk with `stream_options.include_usage`: no choices, the usage, the
    fingerprint and the per-request figures, dumped `exclude_none` (0.32.0
    `completion/serving.py:458-492`, `chat_completion/serving.py:848-893`)."""
    usage = {
        "prompt_tokens": asked.prompt_tokens,
        "total_tokens": asked.prompt_tokens + asked.max_tokens,
        "completion_tokens": asked.max_tokens,
    }
    chunk = {**head.envelope(), "choices": [], "usage": usage}
    if app.fingerprint is not None:
        chunk["system_fingerprint"] = app.fingerprint
    if metrics is not None:
        chunk["metrics"] = without_none(metrics)
    return chunk


def without_none(value: Any) -> Any:
    """A dict dumped with `exclude_none`, nested dicts too."""
    if isinstance(value, dict):
        return {key: without_none(item) for key, item in value.items() if item is not None}
    return value


def step_text(produced: int, step: int) -> str:
    """The filler words of tokens produced..produced+step, as `filler` lays them out."""
    words = [FILLER[i % len(FILLER)] for i in range(produced, produced + step)]
    return (" " if produced else "") + " ".join(words)


def response_body(app: App, chat: bool, text: str, prompt_tokens: int, tokens: int) -> dict:
    """A finished response as vLLM 0.32.0 dumps it (`model_dump()`, every field, None
    included: `entrypoints/openai/completion/protocol.py:654-697`,
    `chat_completion/protocol.py:69-152`, `serve/engine/protocol.py:135-140`); a chat
    message drops `tool_calls` when empty (its serializer, `protocol.py:81-86`)."""
    unset = dict.fromkeys
    choice: dict = {
        "index": 0,
        "logprobs": None,
        "finish_reason": "length",
        **unset(("stop_reason", "token_ids", "routed_experts")),
    }
    if chat:
        message = unset(("refusal", "annotations", "audio", "function_call", "reasoning"))
        choice["message"] = {"role": "assistant", "content": text, **message}
        extra = unset(("prompt_logprobs", "prompt_token_ids", "prompt_text"))
    else:
        choice |= {"text": text, **unset(("prompt_logprobs", "prompt_token_ids"))}
        extra = {}
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": app.model_name,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": app.fingerprint,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + tokens,
            "completion_tokens": tokens,
            **unset(("prompt_tokens_details", "completion_tokens_details")),
        },
        **extra,
        **unset(("kv_transfer_params", "ec_transfer_params", "metrics")),
    }


GARBAGE_METRICS = b'vllm:spec_decode_num_drafts_total{model_name="\n\x00 not } prometheus {{\n'


GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")
"""Paths vLLM's key guards (0.34.0 `entrypoints/serve/middleware/authenticate.py:11`);
/health and /metrics stay open."""
SENSITIVE_ARGS = frozenset({"api_key", "hf_token", "watermark_config"})
"""Logged as *** in "non-default args" (0.32.0 `entrypoints/serve/utils/api_utils.py:271-281`)."""


def api_tokens(args: argparse.Namespace) -> list[bytes]:
    """`--api-key` first, else VLLM_API_KEY; empty ones dropped (0.34.0
    `entrypoints/serve/middleware/register.py:32-36`); kept as SHA-256 as vLLM does
    (`authenticate.py:28`)."""
    keys = args.api_key or [os.environ.get("VLLM_API_KEY")]
    return [hashlib.sha256(key.encode()).digest() for key in keys if key]


def authorized(tokens: list[bytes], authorization: str | None) -> bool:
    """`Authorization: Bearer KEY` with one of the keys (0.34.0 `authenticate.py:30-45`)."""
    if not authorization:
        return False
    scheme, _, param = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    digest = hashlib.sha256(param.encode()).digest()
    return any(hmac.compare_digest(digest, token) for token in tokens)


class Handler(BaseHTTPRequestHandler):
    """vLLM's routes; keep-alive HTTP/1.1 with a length on every response."""

    protocol_version = "HTTP/1.1"
    server: LabHTTPServer

    def _refused(self) -> bool:
        """A guarded path without a valid key gets vLLM's 401 (`authenticate.py:59-61`)."""
        tokens = self.server.app.api_tokens
        path = self.path.split("?", 1)[0]
        if not tokens or not path.startswith(GUARDED_PREFIX):
            return False
        if authorized(tokens, self.headers.get("Authorization")):
            return False
        self._send(401, b'{"error":"Unauthorized"}', "application/json")
        return True

    def do_GET(self) -> None:
        app = self.server.app
        if self._refused():
            return
        if self.path == "/health":
            status = 503 if app.engine_dead else 200
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
            else:  # the classic text format whatever the Accept header, as vLLM's
                # /metrics route answers (prometheus-fastapi-instrumentator's expose:
                # generate_latest, CONTENT_TYPE_LATEST; 0.32.0 and 0.34.0
                # `vllm/entrypoints/serve/instrumentator/metrics.py:64-74`)
                with app.engine.lock:
                    exposition = generate_latest(app.engine.metrics.registry)
                self._send(200, exposition, CONTENT_TYPE_LATEST, app.faults.drip_metrics_seconds)
        else:
            self._send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        routes = {"/v1/completions": False, "/v1/chat/completions": True}
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self._refused():
            return
        if self.path not in routes:
            self._send_json(404, {"detail": "Not Found"})
            return
        if self.server.app.engine_dead:
            message = "EngineCore encountered an issue. See stack trace (above) for the root cause."
            self._send_json(500, error_body(message, "InternalServerError", 500))
            return
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise RequestError("the request body must be a JSON object")
            asked = read_request(self.server.app, request, routes[self.path])
            if asked.stream:
                self._stream(asked)
                return
            answer = completion_body(self.server.app, asked, self._gone)
            if self.server.app.faults.fail_completions:
                raise RequestError("lab fault: fail_completions", "InternalServerError", 500)
            self._send_json(200, answer)
        except json.JSONDecodeError as error:
            self._send_json(400, invalid_json(error))
        except RequestError as error:
            self._send_json(error.code, error.body)
        except ClientGone:
            self.close_connection = True  # nothing to answer: the client left

    def _stream(self, asked: Asked) -> None:
        """Server-sent events as vLLM streams them: `data: {json}` per engine step's
        tokens, sent when the step ends, the usage chunk when asked, then `data: [DONE]`
        (0.32.0 `entrypoints/openai/completion/serving.py:443,492,503`), in chunked
        transfer encoding as uvicorn sends a StreamingResponse. The fail_completions
        fault becomes the error event vLLM streams (`serving.py:496-498`)."""
        app = self.server.app
        head = StreamHead.start(app, asked)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        broken = threading.Event()

        def event(data: str) -> None:
            payload = f"data: {data}\n\n".encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
                self.wfile.flush()
            except OSError:
                broken.set()

        def on_step(produced: int, step: int) -> None:
            finished = produced + step >= asked.max_tokens
            event(json.dumps(token_chunk(head, step_text(produced, step), finished)))

        if asked.chat:
            event(json.dumps(role_chunk(head)))
        gone = lambda: broken.is_set() or self._gone()  # noqa: E731
        drafts = app.engine.generate(
            asked.prompt_tokens, asked.max_tokens, asked.sampling, gone, on_step
        )
        if drafts is None or broken.is_set():
            self.close_connection = True  # aborted: the client left
            return
        if app.faults.fail_completions:
            error = error_body("lab fault: fail_completions", "InternalServerError", 500)
            event(json.dumps(error))
        elif asked.include_usage:
            metrics = request_metrics(app, asked, drafts)
            event(json.dumps(usage_chunk(app, head, asked, metrics)))
        event("[DONE]")
        if not broken.is_set():
            self.wfile.write(b"0\r\n\r\n")

    def _gone(self) -> bool:
        """The client closed its side: readable with nothing to read."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

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
        say(f'INFO:     {host}:{port} - "{self.requestline}" {code} {phrase}')


class LabHTTPServer(ThreadingHTTPServer):
    """Bound at construction, listening only once `server_activate` is called."""

    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 2048
    """uvicorn's default backlog (`uvicorn/config.py:232` in 0.55.0), which vLLM listens with
    (`entrypoints/launchers/launcher.py:92` in 0.32.0): a gate opening its phases' requests
    at once is never dropped by a five-deep queue."""
    app: App

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that left before its answer was written is no error: uvicorn drops
        the answer without a word (`protocols/http/httptools_impl.py:465-466` in 0.55.0)."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


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
    args: argparse.Namespace, container: ContainerPaths, faults: Faults, claimed: Release
) -> App:
    """Read the target and drafter as vLLM does at start-up; any problem raises."""
    config = read_json(Path(args.model_tag) / "config.json")
    log("INFO", "model.py:547", f"Resolved architecture: {config['architectures'][0]}")
    drafting = None
    if args.speculative_config is not None:
        speculative = parse_speculative_config(args.speculative_config, claimed)
        refuse_forced_v2_runner(speculative["method"], claimed)
        drafting = load_drafting(
            speculative,
            container,
            claimed,
            config,
            faults.swa_as_full_attention,
            Path(args.model_tag),
        )
    else:
        runner_env(claimed)
    model_name = (args.served_model_name or [args.model_tag])[0]
    metrics = Metrics(model_name, drafting, not faults.drop_spec_decode)
    seed = args.port if args.seed is None else args.seed
    engine = Engine(
        metrics,
        drafting,
        seed,
        step_cost.profile(args.step_costs),
        args.tokens_per_second,
        LiveKnobs(container.live),
    )
    text = dflash_reading.text_config(config)
    max_model_len = args.max_model_len or text.get("max_position_embeddings")
    defaults = default_sampling(Path(args.model_tag), args)
    return App(
        model_name,
        args.model_tag,
        max_model_len,
        engine,
        faults,
        defaults,
        api_tokens=api_tokens(args),
        fingerprint=system_fingerprint(claimed, args),
        # a server that is not drafting reports no per-request figures either
        per_request_metrics="none"
        if faults.drop_spec_decode
        else getattr(args, "per_request_spec_decode_metrics", "none"),
    )


def system_fingerprint(claimed: Release, args: argparse.Namespace) -> str | None:
    """vLLM's default (`--fingerprint-mode full`) from the release that has one:
    "vllm-<version>[-tp<N>]-<hash8>"; the hash is of the launch here (vLLM hashes its
    whole config), so a different launch gives a different fingerprint."""
    if not claimed.system_fingerprint:
        return None
    parallel = [f"tp{args.tensor_parallel_size}"] if args.tensor_parallel_size > 1 else []
    launch = json.dumps(vars(args), sort_keys=True, default=str).encode()
    return "-".join(["vllm", claimed.version, *parallel, hashlib.sha256(launch).hexdigest()[:8]])


def default_sampling(target: Path, args: argparse.Namespace) -> dict:
    """What a request that leaves sampling fields unset gets: the target's
    generation_config.json under `--generation-config auto` (the default), merged with
    `--override-generation-config` (0.32.0 `config/model.py:1847-1900`)."""
    source = target / GENERATION_CONFIG if args.generation_config == "auto" else None
    if args.generation_config not in ("auto", "vllm"):
        source = Path(args.generation_config) / GENERATION_CONFIG
    config = read_json(source) if source is not None and source.exists() else {}
    config.update(json.loads(args.override_generation_config or "{}"))
    return {key: config[key] for key in SAMPLING_DEFAULTS if config.get(key) is not None}


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
    claimed = release(claimed_version())
    log("INFO", "api_server.py:1839", f"vLLM API server version {claimed.version}")
    defaults = vars(parse_args(["serve", args.model_tag]))
    changed = {
        name: "***" if name in SENSITIVE_ARGS else value
        for name, value in vars(args).items()
        if defaults[name] != value
    }
    log("INFO", "utils.py:233", f"non-default args: {changed}")
    require_loopback(args.host)
    httpd = LabHTTPServer((args.host, args.port), Handler, bind_and_activate=False)
    try:
        httpd.server_bind()
        httpd.app = build_app(args, container, faults, claimed)
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
    httpd.server_activate()
    listening = time.monotonic()
    # Logged before the first request is answered, in vLLM's words: 0.32.0
    # `entrypoints/launchers/api_server/entry.py:140`, just before `serve_http` (the same
    # text in every wheel 0.19.1-0.34.0; the address as `launchers/launcher.py:410` forms it).
    log("INFO", "entry.py:140", f"Starting vLLM server on http://{args.host}:{args.port}")
    say("INFO:     Application startup complete.")
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    every = float(os.environ.get(STATS_INTERVAL_ENV, DEFAULT_STATS_INTERVAL))
    threading.Thread(target=log_stats, args=(httpd.app.engine, every, stop), daemon=True).start()
    try:
        if not stop.wait(faults.crash_after_ready_seconds):
            die(httpd.app, listening, stop)
        log("INFO", "launcher.py:101", "Shutting down FastAPI HTTP server.")
    finally:
        httpd.shutdown()


def die(app: App, listening: float, stop: threading.Event) -> None:
    """The engine dies: its error and traceback in the log, then 503 and 500 until the
    API server's watchdog, every WATCHDOG_SECONDS since it started listening, stops it
    (0.32.0 `entrypoints/launchers/launcher.py:312-332`)."""
    log("ERROR", "core.py:1512", "EngineCore encountered a fatal error.")
    try:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    except RuntimeError:
        traceback.print_exc(file=sys.stdout)
    log(
        "ERROR",
        "async_llm.py:906",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
        "See stack trace (above) for the root cause.",
    )
    app.engine_dead = True
    since = time.monotonic() - listening
    stop.wait(WATCHDOG_SECONDS - since % WATCHDOG_SECONDS)
    say("INFO:     Shutting down")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    serve(args, ContainerPaths(Path(os.environ[CONTAINER_ENV])), threading.Event())
    say(f"INFO:     Finished server process [{os.getpid()}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
