"""Preflight: read-only facts about a target, and the findings they lead to.

`gather` only reads (one round trip, and the server's check unless a kept verdict
holds); `judge` is pure. Nothing here changes
the target, so a failed preflight leaves it exactly as it was.
"""

from __future__ import annotations

import shlex
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import TypeVar

from orchestrator import remotejson
from orchestrator.container import probe, validator, verdict
from orchestrator.container.gpu import Gpu, GpuApp, parse_gpu_apps, parse_gpus
from orchestrator.container.server import ServerState, parse_server_state
from orchestrator.container.shell import DEFAULT_TIMEOUT, parse_frames, parse_listing, run_step
from orchestrator.container.store import release_id_of
from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs
from orchestrator.drafters.modelfiles import (
    CONFIG_FILE,
    SAFETENSORS_HEADER_LIMIT,
    TOKENIZER_CONFIG_FILE,
    ModelFiles,
    model_files_from_bytes,
)
from orchestrator.errors import ServiceUnavailable, StepFailed
from orchestrator.layout import DRAFTER_CONFIG, LAUNCH_SCRIPT
from orchestrator.plan import TargetPlan
from orchestrator.playbook import Sampling
from orchestrator.probes.sampling import (
    GENERATION_CONFIG_FILE,
    GREEDY,
    sampling_findings,
    server_defaults,
)
from orchestrator.serving import server_check
from orchestrator.serving.acceptance_source import SourceChoice, auto_source
from orchestrator.serving.judge import Launch, judge_server, read_launch
from orchestrator.transport.base import Transport

T = TypeVar("T")

INDEX_FILE = "model.safetensors.index.json"
MIN_FREE_DISK_KIB = 64 * 1024
MIN_FREE_GPU_SHARE = 0.5
WAITING_SAY_SECONDS = 1.0
"""How often preflight says it still waits for the server's own check."""


@dataclass(frozen=True)
class ModelDir:
    path: str
    exists: bool
    files: ModelFiles | None
    sizes: dict[str, int]
    frames: dict[str, bytes]


@dataclass(frozen=True)
class Facts:
    target: ModelDir
    drafter: ModelDir | None
    gpus: list[Gpu] | None
    gpu_apps: list[GpuApp]
    free_disk_kib: int
    server: ServerState
    port_taken: bool
    current_release: str | None
    gpu_error: str = ""
    server_version: str | None = None
    server_version_error: str = ""
    server_check: validator.ServerCheck | None = None
    siblings: list[probe.Sibling] = field(default_factory=list)
    """Other playbooks' deployments on the container whose servers run."""
    verdict_key: str | None = None
    """What a passing server check of this launch on this install is kept under
    (container/verdict.py); None: the install has no identity, nothing is kept."""


MODEL_FILES = [CONFIG_FILE, TOKENIZER_CONFIG_FILE, INDEX_FILE, GENERATION_CONFIG_FILE]
"""The files preflight reads whole from each model dir (the weights' headers besides)."""


def read_model_dir(transport: Transport, path: str) -> ModelDir:
    result = transport.run(
        probe.read_model_dir(path, MODEL_FILES, SAFETENSORS_HEADER_LIMIT), timeout=120
    )
    if result.exit_code == 3:
        return model_dir_of(path, None)
    if not result.ok:
        raise StepFailed(
            f"read {path}: exit {result.exit_code}: {result.error_text[-500:]}",
            subject=transport.label,
        )
    return model_dir_of(path, parse_frames(result.stdout))


def launch_read(plan: TargetPlan, vllm: str | None) -> probe.LaunchRead:
    """What preflight, and a check of a release already there, read of a launch: the
    plan's model dirs (MODEL_FILES whole, the weights' headers) and `vllm`'s kept verdict."""
    return probe.LaunchRead(
        plan.target_dir, plan.drafter_weights, MODEL_FILES, SAFETENSORS_HEADER_LIMIT, vllm
    )


def model_dirs_read(plan: TargetPlan, frames: dict[str, bytes]) -> tuple[ModelDir, ModelDir | None]:
    """The target's and the drafter's model dirs (None: the plan has no drafter dir) as
    a launch_read's frames say."""
    target = model_dir_of(plan.target_dir, probe.prefixed(frames, probe.TARGET))
    if not plan.drafter_weights:
        return target, None
    return target, model_dir_of(plan.drafter_weights, probe.prefixed(frames, probe.DRAFTER))


def model_dir_of(path: str, frames: dict[str, bytes] | None) -> ModelDir:
    """A model dir as its frames say (None: it does not exist)."""
    if frames is None:
        return ModelDir(path, False, None, {}, {})
    frames = dict(frames)
    sizes = parse_listing(frames.pop(".listing", b"").decode())
    return ModelDir(path, True, model_files_from_bytes(path, frames), sizes, frames)


def started(work: Callable[[], T]) -> Future[T]:
    """`work` begun now in a daemon thread: a run that stops meanwhile (an error, a
    signal) does not wait for it, as it would for a ThreadPoolExecutor's thread."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # raised again by future.result()
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


def gather(
    transport: Transport,
    plan: TargetPlan,
    nvidia_smi: str,
    recheck: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> Facts:
    """One round trip for every read-only fact (probe.preflight_facts), then, unless a
    kept verdict of this launch on this install is reused (never with `recheck`), the
    server's own dry run, which imports vLLM (15-35 s on a CPU) and says its version
    (a launch that runs no `vllm serve` gets `vllm --version` alone); beside it, when
    no server of ours runs, one probe of the port. `progress` hears each part as it
    begins, and while the dry run is all that is left, what is waited for each
    WAITING_SAY_SECONDS (the step view's heartbeat shows it, in a pipe too)."""
    launch = read_launch(plan.files[LAUNCH_SCRIPT].decode("utf-8", "replace"), plan.release_id)
    progress("read facts")
    frames = parse_frames(
        run_step(
            transport,
            probe.preflight_facts(plan.layout, nvidia_smi, launch_read(plan, launch.executable)),
            "read target facts",
            timeout=120,
        ).stdout
    )
    target, drafter = model_dirs_read(plan, frames)
    payload = server_request(plan, launch)
    key = verdict_key(payload, frames.get(verdict.INSTALL), target, drafter)
    kept = None if recheck else verdict.reusable(frames.get(verdict.VERDICT), key)
    vllm = launch.executable
    said: Future[validator.ServerCheck] = Future()
    if kept is not None:
        said.set_result(kept.as_check())
    elif vllm:
        progress(f"server check ({vllm})")
        said = started(lambda: validator.check(transport, vllm, payload))
    else:  # a template that runs no `vllm serve`: its version alone
        said = started(lambda: version_alone(transport, plan.vllm))
    server = parse_server_state(frames["server"].decode())
    port_taken = False
    if not server.running:
        try:
            transport.open_stream(plan.address, plan.port, timeout=5).close()
            port_taken = True
        except ServiceUnavailable:
            port_taken = False
    while not said.done():
        progress(f"waiting for {plan.vllm}'s own check of the launch (it imports vLLM)")
        wait([said], timeout=WAITING_SAY_SECONDS)
    checked = said.result()
    version, version_error = server_version(checked)
    gpus_ok, apps_ok = frames["gpus.rc"] == b"0", frames["apps.rc"] == b"0"
    return Facts(
        target=target,
        drafter=drafter,
        gpus=parse_gpus(frames["gpus"].decode()) if gpus_ok else None,
        gpu_apps=parse_gpu_apps(frames["apps"].decode()) if apps_ok else [],
        free_disk_kib=int(frames["disk"].strip() or 0),
        server=server,
        port_taken=port_taken,
        current_release=release_id_of(frames["current"].decode()),
        gpu_error="" if gpus_ok else frames["gpus"].decode("utf-8", "replace")[:300],
        server_version=version,
        server_version_error=version_error,
        server_check=checked if vllm else None,
        siblings=probe.parse_siblings(frames),
        verdict_key=key,
    )


@dataclass(frozen=True)
class Served:
    """The plan a container deploys, the facts preflight read for it, and why its gate
    reads the figures it reads (serving/acceptance_source.py)."""

    plan: TargetPlan
    facts: Facts
    source: SourceChoice | None
    """None: the playbook chose its source itself (not `auto`)."""


def gather_for_server(
    transport: Transport,
    plan: TargetPlan,
    nvidia_smi: str,
    recheck: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> Served:
    """`gather`, for the launch that will run. With `gate.acceptance_source: auto` the
    plan asks for per-request figures; on a vLLM the facts show without them it is the
    plan without the flag (`counters_plan`), gathered again: its dry run checks the
    launch as it will run."""
    facts = gather(transport, plan, nvidia_smi, recheck, progress)
    if plan.counters_plan is None:
        return Served(plan, facts, None)
    choice = auto_source(facts.server_version)
    if choice.per_request:
        return Served(plan, facts, choice)
    chosen = plan.counters_plan
    return Served(chosen, gather(transport, chosen, nvidia_smi, recheck, progress), choice)


def version_alone(transport: Transport, vllm: str) -> validator.ServerCheck:
    """No check, only what `vllm --version` prints (as the check says it without Python)."""
    result = transport.run(probe.read_vllm_version(vllm), timeout=DEFAULT_TIMEOUT)
    said = result.stdout.decode("utf-8", "replace")
    return validator.ServerCheck(
        unavailable=f"'vllm --version' gave no version (exit {result.exit_code}: "
        f"{(said.strip().splitlines() or ['no output'])[-1][:200]})",
        version_said=said if result.ok else None,
    )


def server_version(found: validator.ServerCheck) -> tuple[str | None, str]:
    """The version the server check's vLLM reported (its dry run, else the `vllm
    --version` run in its place), or why it is unknown."""
    if found.reply is not None:
        said = found.reply.version
        if probe.is_version(said):
            return said, ""
        return None, f"the server check's vLLM gave no version ({said[:200]})"
    if found.version_said is not None:
        return probe.parse_vllm_version(found.version_said, 0)
    return None, f"no version of the server's vLLM: {found.unavailable}"


def verdict_to_keep(facts: Facts, run_id: str, time: str) -> verdict.Verdict | None:
    """The verdict a deploy keeps: a check run now (not reused) that passed, of an
    install with an identity."""
    found = facts.server_check
    if found is None or found.reused or not found.passed or facts.verdict_key is None:
        return None
    assert found.reply is not None
    return verdict.Verdict(key=facts.verdict_key, time=time, run_id=run_id, reply=found.reply)


def verdict_key(
    payload: dict, install: bytes | None, target: ModelDir, drafter: ModelDir | None
) -> str | None:
    """What the server check's verdict on `payload` is kept under (verdict.key_of): the
    install's identity (its INSTALL frame) and the files read of each model dir."""
    return verdict.key_of(
        payload,
        (install or b"").decode("utf-8", "replace"),
        {
            f"{role}{name}": data
            for role, model in ((probe.TARGET, target), (probe.DRAFTER, drafter))
            if model is not None
            for name, data in model.frames.items()
            if name in MODEL_FILES
        },
    )


def server_request(plan: TargetPlan, launch: Launch) -> dict:
    """The server check's request for the exact launch; the release's rendered drafter
    config is staged where the launch names it (the release is not written yet)."""
    stage = {}
    if plan.drafter_config is not None and plan.drafter_dir == plan.drafter_view:
        stage[plan.drafter_view] = {CONFIG_FILE: plan.files[DRAFTER_CONFIG].decode()}
    return validator.request(launch.argv, launch.env, stage)


def ask_server(transport: Transport, plan: TargetPlan, launch: Launch) -> validator.ServerCheck:
    """The target's own vLLM over the exact launch (see server_request)."""
    return validator.check(transport, launch.executable or plan.vllm, server_request(plan, launch))


def judge(
    facts: Facts,
    plan: TargetPlan,
    tensor_parallel_size: int,
    num_speculative_tokens: int,
    sampling: Sampling = GREEDY,
    others: Others | None = None,
) -> list[Finding]:
    """Every finding the facts support, errors and warnings, in a stable order.
    `sampling` is the gate's: the server's own defaults are judged against it;
    `others` says how to speak of other playbooks' servers on the container."""
    others = others or Others()
    findings = drafter_findings(facts.target, facts.drafter, plan, num_speculative_tokens)
    findings += server_findings(facts, plan)
    defaults = server_defaults(
        facts.target.frames.get(GENERATION_CONFIG_FILE),
        plan.files[LAUNCH_SCRIPT].decode("utf-8", "replace"),
    )
    findings += sampling_findings(defaults, sampling)
    findings += _gpu_findings(facts, tensor_parallel_size, plan, others)
    if facts.port_taken:
        findings.append(_port_finding(facts, plan, others))
    if facts.free_disk_kib < MIN_FREE_DISK_KIB:
        findings.append(
            Finding.error(
                "disk",
                f"only {facts.free_disk_kib} KiB free under {plan.deployment_dir}",
                expected=f">= {MIN_FREE_DISK_KIB} KiB",
                actual=facts.free_disk_kib,
            )
        )
    return findings


@dataclass(frozen=True)
class Others:
    """How preflight speaks of other playbooks' servers on the container: the one a
    `deploy --replace` stops first (then what it holds is no error), and the inventory
    and playbook (`playbook.command_name`: a path when given by one) the commands that
    free them name, so each runs as printed."""

    replaced: str | None = None
    inventory: str = "INVENTORY"
    playbook: str | None = None
    """The playbook checked, as a command names it; None: by its name."""

    def frees(self, plan: TargetPlan, siblings: list[probe.Sibling]) -> str:
        held = ", ".join(f"{s.name}'s server (pid {s.pid})" for s in siblings)
        where = shlex.join(["-i", self.inventory, "--limit", plan.container])
        stops = " and ".join(f"`{shlex.join(['orch', 'stop', s.name])} {where}`" for s in siblings)
        mine = shlex.quote(self.playbook or plan.playbook)
        switch = (
            f"`orch deploy {mine} {where} --replace {shlex.quote(siblings[0].name)}`"
            if len(siblings) == 1
            else ""
        )
        return f"held by {held}, another orch playbook on this container: {stops} frees it" + (
            f", or {switch} switches over in one transaction" if switch else ""
        )


def _processes(apps: list[GpuApp]) -> str:
    """`PID 19690 (python3, 44226 MiB)` for each process nvidia-smi lists on a GPU."""
    return ", ".join(f"PID {a.pid} ({a.name or 'unnamed'}, {a.used_mib} MiB)" for a in apps)


def _port_finding(facts: Facts, plan: TargetPlan, others: Others) -> Finding:
    """A taken port, and whose it is when another playbook's server is the holder."""
    where = f"{plan.address}:{plan.port} is in use"
    holders = [s for s in facts.siblings if s.port in (plan.port, None)]
    if holders and {s.name for s in holders} == {others.replaced}:
        return Finding.warning(
            "server.port",
            f"{where} by {others.replaced}'s server (pid {holders[0].pid}), which --replace "
            "stops first",
            actual="in use",
        )
    if holders:
        return Finding.error(
            "server.port", f"{where}: {others.frees(plan, holders)}", actual="in use"
        )
    return Finding.error(
        "server.port",
        f"{where} by a process orch did not start; stop it or choose another server.port",
        actual="in use",
    )


def drafter_findings(
    target: ModelDir, drafter: ModelDir | None, plan: TargetPlan, num_speculative_tokens: int
) -> list[Finding]:
    """The model dirs as found, and the kind's rules on the drafter config vLLM will load:
    the rendered one, else the one the drafter dir ships (none for MTP and n-gram)."""
    shipped = plan.drafter_config is None
    findings = _model_dir_findings("target", target)
    if drafter is not None:
        findings += _model_dir_findings("drafter", drafter, judge_config=shipped)
    if not (target.files and target.files.config is not None):
        return findings
    if drafter is not None and not drafter.exists:
        return findings
    config = plan.drafter_config
    if config is None and drafter is not None:
        assert drafter.files is not None
        config = drafter.files.config
        if config is None:
            return findings  # the shipped config.json is missing or unreadable: reported
    return findings + plan.kind.check(
        CheckInputs(
            config or {},
            target.files.config,
            tokenizer=target.files.tokenizer_config,
            tensors=drafter.files.tensors if drafter and drafter.files else None,
            drafter_files=sorted(drafter.sizes) if drafter else None,
            profile=plan.profile,
            num_speculative_tokens=num_speculative_tokens,
        )
    )


def server_findings(facts: Facts, plan: TargetPlan) -> list[Finding]:
    """The release's launch script and drafter config judged against the vLLM version
    found on the container, with the target's own config.json."""
    launch = read_launch(plan.files[LAUNCH_SCRIPT].decode("utf-8", "replace"), plan.release_id)
    target = facts.target.files.config if facts.target.files else None
    shipped = facts.drafter.files.config if facts.drafter and facts.drafter.files else None
    checked = server_check.findings(facts.server_check, launch) if facts.server_check else []
    return checked + judge_server(
        facts.server_version,
        launch,
        plan.drafter_config if plan.drafter_config is not None else shipped,
        target,
        unreadable=facts.server_version_error,
        server_checked=facts.server_check is not None and facts.server_check.reply is not None,
    )


def _model_dir_findings(role: str, model: ModelDir, judge_config: bool = True) -> list[Finding]:
    if not model.exists:
        return [
            Finding.error(
                f"{role}.path",
                f"{model.path} does not exist on the target",
                expected="a model directory",
                actual="missing",
            )
        ]
    assert model.files is not None
    if role == "drafter":
        weights = [n for n in model.sizes if n.endswith(".safetensors")]
        if not weights:
            return [
                Finding.error(
                    "drafter.weights",
                    f"no *.safetensors in {model.path}",
                    actual=sorted(model.sizes),
                )
            ]
        if judge_config:  # the drafter ships the config vLLM loads
            return model.files.findings + _truncated(model)
        # The download's own config.json is not deployed (the view links the release's):
        # judge the weights alone.
        frames = {n: data for n, data in model.frames.items() if n != CONFIG_FILE}
        found = model_files_from_bytes(model.path, frames).findings
        return [f for f in found if f.field != CONFIG_FILE] + _truncated(model)
    return model.files.findings + _missing_shards(model) + _truncated(model)


def _missing_shards(model: ModelDir) -> list[Finding]:
    if INDEX_FILE not in model.frames:
        return []
    try:
        shards = set(remotejson.loads(model.frames[INDEX_FILE])["weight_map"].values())
    except (ValueError, KeyError, TypeError, AttributeError):
        return [
            Finding.error(
                f"target.{INDEX_FILE}",
                f"{model.path}/{INDEX_FILE} is not a valid safetensors index",
            )
        ]
    missing = sorted(s for s in shards if s not in model.sizes)
    if not missing:
        return []
    return [
        Finding.error(
            "target.weights",
            f"{len(missing)} shard(s) named in {INDEX_FILE} are "
            "missing: the download is incomplete",
            expected=sorted(shards),
            actual=missing,
        )
    ]


def _truncated(model: ModelDir) -> list[Finding]:
    """A weight file shorter than its own header says was cut off mid-download."""
    findings = []
    for name, prefix in model.frames.items():
        if not name.endswith(".safetensors") or len(prefix) < 8:
            continue
        length = struct.unpack("<Q", prefix[:8])[0]
        try:
            header = remotejson.loads(prefix[8 : 8 + length])
            end = max(
                (e["data_offsets"][1] for k, e in header.items() if k != "__metadata__"), default=0
            )
            expected = 8 + length + int(end)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            continue  # reported by the header parser
        if model.sizes.get(name, expected) < expected:
            findings.append(
                Finding.error(
                    f"weights.{name}",
                    f"{model.path}/{name} is truncated: download it again",
                    expected=expected,
                    actual=model.sizes[name],
                )
            )
    return findings


def _gpu_findings(
    facts: Facts, tensor_parallel_size: int, plan: TargetPlan, others: Others
) -> list[Finding]:
    if facts.gpus is None:
        return [
            Finding.error(
                "gpus", f"nvidia-smi failed: {facts.gpu_error}", actual="no GPU information"
            )
        ]
    if len(facts.gpus) < tensor_parallel_size:
        return [
            Finding.error(
                "server.tensor_parallel_size",
                f"the container has {len(facts.gpus)} GPU(s)",
                expected=f">= {tensor_parallel_size}",
                actual=len(facts.gpus),
            )
        ]
    ours = facts.server.pid if facts.server.running else None
    siblings = [s for s in facts.siblings if s.name != others.replaced]
    replaced = next((s.pid for s in facts.siblings if s.name == others.replaced), None)
    findings = []
    for gpu in facts.gpus[:tensor_parallel_size]:
        freed = sum(a.used_mib for a in facts.gpu_apps if a.pid == ours and a.gpu_uuid == gpu.uuid)
        available = gpu.free_mib + freed
        if available >= MIN_FREE_GPU_SHARE * gpu.total_mib:
            continue
        apps = [a for a in facts.gpu_apps if a.gpu_uuid == gpu.uuid and a.pid != ours]
        field, expected = f"gpu[{gpu.index}].memory", f">= {int(MIN_FREE_GPU_SHARE * 100)}% free"
        message = f"GPU {gpu.index} has {available} MiB of {gpu.total_mib} MiB free" + (
            f", used by {_processes(apps)}" if apps else ""
        )
        seen = {a.pid for a in apps}
        stopped_first = ours if ours is not None else replaced
        if stopped_first is None and facts.server.leftover:  # a dead server's workers
            findings.append(
                Finding.warning(
                    field,
                    f"{message}; the server that died (PID {facts.server.pid}) left its "
                    "processes holding it: they are ended first and the switch waits for "
                    "the memory",
                    expected=expected,
                    actual=available,
                )
            )
        elif stopped_first is not None:  # its workers may hold it under PIDs we cannot see
            findings.append(
                Finding.warning(
                    field,
                    f"{message}; the running server (PID {stopped_first}) is stopped first "
                    "and the switch waits for the memory",
                    expected=expected,
                    actual=available,
                )
            )
        elif siblings:  # inside LXC nvidia-smi may not show their PIDs: named all the same
            sure = [s for s in siblings if s.pid in seen]
            findings.append(
                Finding.error(
                    field,
                    f"{message}: {others.frees(plan, sure)}"
                    if sure
                    else f"{message}: probably {others.frees(plan, siblings)}",
                    expected=expected,
                    actual=available,
                )
            )
        else:
            findings.append(Finding.error(field, message, expected=expected, actual=available))
    return findings
