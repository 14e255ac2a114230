"""How fast a server decodes, with and without a drafter, at a given number of streams.

A level is a number of concurrent streams. At each level the probe sends rounds of
that many streamed greedy completions at once (`ignore_eos`, so every one yields
`max_tokens`), and takes from each round two figures: the mean per-stream decode
speed (output tokens after the first over the time from first to last token) and
the round's total output tokens per second (all its tokens over the time from its
first request sent to its last token). Requests of one round share engine steps, so
the round, not the request, is the independent sample: each figure's 95% bound is
Student's t over the rounds. The machine's load average is read beside each level:
on a shared machine it says what else was running.

A third figure does not depend on that: output tokens per CPU-second of the server's
own processes (their user and system time from /proc, over each round). On two cores
shared with other work, wall-clock figures move by several times between runs while
the server's CPU time per token stays put; the server is CPU-bound, so on idle cores
the wall-clock speedup is the CPU-time speedup.

`serving()` starts the real vLLM (the lab's CPU build) for one target and drafter
through the same launcher the real-server lab writes into its containers
(`realserver.py`), on loopback, and stops it by its recorded process group.

`gate_speed()` runs the gate's own speed phase (`gate/run.py`'s `measure_levels`: the
code a deploy's gate runs) on a server on loopback, so what a gate would measure and
judge is shown beside these figures.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.gate.probe import Target
from orchestrator.gate.report import SpeedReport
from orchestrator.gate.run import measure_levels
from orchestrator.lab import realserver
from orchestrator.lab.paths import ContainerPaths, server_records
from orchestrator.metrics.stats import student_t_quantile
from orchestrator.playbook import Gate
from orchestrator.probes import load_prompts
from orchestrator.probes.context import ContextBucket
from orchestrator.transport.base import Result

CONFIDENCE = 0.95
SERVED_NAME = "speed"
MAX_MODEL_LEN = 1024
READY_TIMEOUT = 600.0
REQUEST_TIMEOUT = 300.0
PROMPTS = Path(__file__).resolve().parent.parent / "probes" / "builtin.jsonl"
SPEC_COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_total")


@dataclass(frozen=True)
class Bounded:
    """A mean over independent samples and its two-sided 95% bounds (none from one sample)."""

    mean: float
    low: float | None
    high: float | None
    samples: int


def mean_bound(samples: Sequence[float]) -> Bounded:
    mean = statistics.fmean(samples)
    if len(samples) < 2:
        return Bounded(mean, None, None, len(samples))
    half = student_t_quantile((1 + CONFIDENCE) / 2, len(samples) - 1)
    half *= statistics.stdev(samples) / math.sqrt(len(samples))
    return Bounded(mean, mean - half, mean + half, len(samples))


def ratio_bound(numerator: Bounded, denominator: Bounded) -> Bounded:
    """numerator / denominator, bounded by the ratio of opposite bounds: each side's own
    interval at 95%, so the ratio's interval covers at least 90% (Bonferroni)."""
    mean, samples = numerator.mean / denominator.mean, min(numerator.samples, denominator.samples)
    top_low, top_high, bottom_low, bottom_high = (
        numerator.low,
        numerator.high,
        denominator.low,
        denominator.high,
    )
    if top_low is None or top_high is None or bottom_low is None or bottom_high is None:
        return Bounded(mean, None, None, samples)
    low = top_low / bottom_high if bottom_high > 0 else None
    high = top_high / bottom_low if bottom_low > 0 else math.inf
    return Bounded(mean, low, high, samples)


@dataclass(frozen=True)
class RequestTiming:
    """One streamed completion: when it was sent, its first and last tokens came."""

    sent: float
    first: float
    last: float
    tokens: int

    @property
    def decode_speed(self) -> float:
        """Output tokens after the first per second from the first token to the last."""
        return (self.tokens - 1) / (self.last - self.first) if self.last > self.first else 0.0


def round_figures(timings: Sequence[RequestTiming]) -> tuple[float, float]:
    """A round's mean per-stream decode speed and its total output tokens per second."""
    per_stream = statistics.fmean(t.decode_speed for t in timings)
    span = max(t.last for t in timings) - min(t.sent for t in timings)
    return per_stream, sum(t.tokens for t in timings) / span


@dataclass(frozen=True)
class LevelFigures:
    """What one level measured: per-stream and total output tokens/s, output tokens per
    CPU-second of the server, the mean acceptance length the server counted meanwhile
    (None without a drafter), and the load average."""

    streams: int
    per_stream: Bounded
    total: Bounded
    per_cpu_second: Bounded
    acceptance_length: float | None
    load: tuple[float, float, float]
    seconds: float


def completion_body(prompt: str, max_tokens: int) -> bytes:
    return json.dumps(
        {
            "model": SERVED_NAME,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()


def stream_completion(port: int, prompt: str, max_tokens: int) -> RequestTiming:
    """POST a streamed completion and time its chunks as they arrive."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    sent = time.monotonic()
    first = last = 0.0
    tokens = 0
    try:
        connection.request(
            "POST",
            "/v1/completions",
            completion_body(prompt, max_tokens),
            {"Content-Type": "application/json"},
        )
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"completion: HTTP {response.status}: {response.read()[:300]!r}")
        for raw in response:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[len(b"data: ") :])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if any(choice.get("text") for choice in chunk.get("choices", [])):
                last = time.monotonic()
                first = first or last
    finally:
        connection.close()
    return RequestTiming(sent, first, last, tokens)


def prompts() -> list[str]:
    lines = PROMPTS.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["prompt"] for line in lines if line.strip()]


def run_round(port: int, streams: int, max_tokens: int, offset: int) -> list[RequestTiming]:
    """`streams` completions at once, each on its own thread, of different prompts."""
    texts = prompts()
    results: list[RequestTiming | BaseException] = [RuntimeError("not run")] * streams
    start = threading.Barrier(streams)

    def one(index: int) -> None:
        try:
            start.wait()
            prompt = texts[(offset + index) % len(texts)]
            results[index] = stream_completion(port, prompt, max_tokens)
        except BaseException as error:  # handed to the caller below
            results[index] = error

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [r for r in results if isinstance(r, RequestTiming)]


def spec_counters(port: int) -> dict[str, float]:
    """The server's draft and accepted-token counters (absent without a drafter)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    found = {}
    for name in SPEC_COUNTERS:
        values = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
        if values:
            found[name] = sum(float(v) for v in values)
    return found


def cpu_seconds(pgid: int) -> float:
    """User and system time of every process in a process group so far."""
    ticks = 0
    for pid in realserver.group_members(pgid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / os.sysconf("SC_CLK_TCK")


def measure_level(
    port: int, streams: int, rounds: int, max_tokens: int, server_cpu: Callable[[], float]
) -> LevelFigures:
    """One warm-up round, then `rounds` measured ones."""
    run_round(port, streams, max_tokens, offset=0)
    before, started = spec_counters(port), time.monotonic()
    per_stream, total, per_cpu = [], [], []
    for index in range(rounds):
        cpu = server_cpu()
        timings = run_round(port, streams, max_tokens, offset=(index + 1) * streams)
        per_cpu.append(sum(t.tokens for t in timings) / max(server_cpu() - cpu, 1e-3))
        stream_speed, total_speed = round_figures(timings)
        per_stream.append(stream_speed)
        total.append(total_speed)
    after = spec_counters(port)
    acceptance = None
    if after:
        drafts = after[SPEC_COUNTERS[0]] - before.get(SPEC_COUNTERS[0], 0.0)
        accepted = after[SPEC_COUNTERS[1]] - before.get(SPEC_COUNTERS[1], 0.0)
        acceptance = 1 + accepted / drafts if drafts else None
    return LevelFigures(
        streams,
        mean_bound(per_stream),
        mean_bound(total),
        mean_bound(per_cpu),
        acceptance,
        os.getloadavg(),
        time.monotonic() - started,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_argv(launcher: Path, target: Path, port: int, drafter: Path | None, k: int) -> list[str]:
    """`vllm serve` for the target alone, or with `drafter` as a `draft_model` drafter."""
    argv = [
        str(launcher),
        "serve",
        str(target),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        SERVED_NAME,
        "--max-model-len",
        str(MAX_MODEL_LEN),
    ]
    if drafter is not None:
        config = {"method": "draft_model", "model": str(drafter), "num_speculative_tokens": k}
        argv += ["--speculative-config", json.dumps(config)]
    return argv


def wait_ready(port: int, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} while starting")
        with contextlib.suppress(OSError, http.client.HTTPException):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                connection.request("GET", "/health")
                if connection.getresponse().status == 200:
                    return
            finally:
                connection.close()
        time.sleep(0.5)
    raise RuntimeError(f"the server was not ready within {timeout:.0f} s")


@contextlib.contextmanager
def serving(
    venv: Path, target: Path, drafter: Path | None, k: int, log: Path
) -> Iterator[tuple[int, float, int]]:
    """The real server of `target` (with `drafter`), ready: its port, start seconds and
    process group."""
    with tempfile.TemporaryDirectory(prefix="orch-speed-") as work:
        container = ContainerPaths(Path(work) / "100")
        realserver.write_launcher(container, venv)
        port = free_port()
        started = time.monotonic()
        with log.open("ab") as output:
            process = subprocess.Popen(
                serve_argv(container.vllm, target, port, drafter, k),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_ready(port, process, READY_TIMEOUT)
            yield port, time.monotonic() - started, process.pid
        finally:
            records = server_records(container) or [{"pid": process.pid, "pgid": process.pid}]
            realserver.stop_servers(records)
            process.wait(timeout=60)
            shutil.rmtree(realserver.tmp_dir(container), ignore_errors=True)


class Loopback:
    """The gate's transport to a server on this machine's loopback, outside any
    container: a stream is a socket. The speed phase runs no command."""

    label = "loopback"

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        raise RuntimeError(f"the loopback transport runs no command: {list(argv)}")

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> socket.socket:
        return socket.create_connection((address, port), timeout=timeout)


def gate_speed(port: int, served_name: str, gate: Gate) -> SpeedReport:
    """The gate's speed phase at `gate.speed`'s levels on the server at `port`, within
    `gate.time_budget`, unjudged (`gate.speed.judge_speed` judges it)."""
    target = Target(Loopback(), "127.0.0.1", port, served_name)
    bucket = ContextBucket("short", 0, None, tuple(load_prompts(gate.probe.prompts)))
    return measure_levels(target, gate, [bucket], None, lambda _: None)


@dataclass(frozen=True)
class ServerRun:
    """One server's start seconds, its figures per level, and the gate's speed phase
    on it (None when not asked for)."""

    start_seconds: float
    levels: list[LevelFigures]
    gate: SpeedReport | None


def measure_server(
    venv: Path,
    target: Path,
    drafter: Path | None,
    k: int,
    levels: Sequence[tuple[int, int]],
    max_tokens: int,
    log: Path,
    gate: Gate | None = None,
) -> ServerRun:
    """Start the server, measure each (streams, rounds) level, then, given a `gate`,
    run its speed phase; stop the server."""
    with serving(venv, target, drafter, k, log) as (port, start_seconds, pgid):
        figures = [
            measure_level(port, streams, rounds, max_tokens, lambda: cpu_seconds(pgid))
            for streams, rounds in levels
        ]
        phase = gate_speed(port, SERVED_NAME, gate) if gate is not None else None
        return ServerRun(start_seconds, figures, phase)
