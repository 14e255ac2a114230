"""Preflight's judgement as a pure function of facts built from real model bytes."""

from __future__ import annotations

import dataclasses
import json
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from fleets import Fleet

from orchestrator.container.gpu import Gpu, GpuApp
from orchestrator.container.probe import Sibling, parse_siblings
from orchestrator.container.server import ServerState
from orchestrator.drafters.findings import Finding, Severity
from orchestrator.drafters.kinds.dflash.drafter import IDS
from orchestrator.drafters.modelfiles import model_files_from_bytes, write_safetensors_stub
from orchestrator.drafters.profiles import get_profile, target_files
from orchestrator.inventory import load_inventory
from orchestrator.lab.models import dflash_layout
from orchestrator.plan import TargetPlan, plan_deploy
from orchestrator.playbook import command_name, find_playbook, load_playbook
from orchestrator.preflight import (
    INDEX_FILE,
    MIN_FREE_DISK_KIB,
    Facts,
    ModelDir,
    Others,
    drafter_findings,
    gather,
    judge,
)
from orchestrator.serving.capabilities import newest_version
from orchestrator.transport.base import Result

ROOT = Path(__file__).resolve().parent.parent.parent
DRAFTERS = Path(__file__).parent.parent / "fixtures" / "drafters"
QWEN36 = "z-lab/Qwen3.6-27B-DFlash"
TARGET = "/opt/models/Qwen3.6-27B"
DRAFTER = "/opt/models/Qwen3.6-27B-DFlash"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
TP = 2
SPEC_TOKENS = 15


def model_dir(path: str, frames: dict[str, bytes], sizes: dict[str, int]) -> ModelDir:
    """What preflight.read_model_dir makes of a read-back directory."""
    return ModelDir(path, True, model_files_from_bytes(path, frames), sizes, frames)


def header_prefix(path: Path) -> bytes:
    """The first 8 + N bytes, as read_model_dir frames them (the data is gigabytes)."""
    with path.open("rb") as file:
        first8 = file.read(8)
        return first8 + file.read(struct.unpack("<Q", first8)[0])


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real safetensors stubs: two target shards and the drafter's published layout."""
    directory = tmp_path_factory.mktemp("weights")
    write_safetensors_stub(directory / SHARDS[0], {"model.embed_tokens.weight": ("BF16", [64, 8])})
    write_safetensors_stub(directory / SHARDS[1], {"lm_head.weight": ("BF16", [64, 8])})
    layout = dflash_layout(get_profile(QWEN36).config)
    write_safetensors_stub(directory / "model.safetensors", layout)
    return directory


@pytest.fixture(scope="module")
def target(weights: Path) -> ModelDir:
    index = json.dumps(
        {"weight_map": {"model.embed_tokens.weight": SHARDS[0], "lm_head.weight": SHARDS[1]}}
    ).encode()
    frames = {**target_files(QWEN36), INDEX_FILE: index}
    frames.update({name: header_prefix(weights / name) for name in SHARDS})
    sizes = {name: len(data) for name, data in frames.items()}
    sizes.update({name: (weights / name).stat().st_size for name in SHARDS})
    return model_dir(TARGET, frames, sizes)


@pytest.fixture(scope="module")
def drafter(weights: Path) -> ModelDir:
    """As published: weights and no config.json."""
    path = weights / "model.safetensors"
    return model_dir(DRAFTER, {path.name: header_prefix(path)}, {path.name: path.stat().st_size})


@pytest.fixture(scope="module")
def plan() -> TargetPlan:
    playbook = load_playbook(ROOT / "playbooks" / "qwen-dflash.yaml")
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    [ct129] = plan_deploy(playbook, inventory, ["ct129"])
    return ct129


@pytest.fixture
def facts(target: ModelDir, drafter: ModelDir) -> Facts:
    """A container ready for a deploy: two idle GPUs, free disk, nothing on the port."""
    return Facts(
        target=target,
        drafter=drafter,
        gpus=[Gpu(0, "GPU-0", 49140, 1, 49139), Gpu(1, "GPU-1", 49140, 1, 49139)],
        gpu_apps=[],
        free_disk_kib=10 * 1024 * 1024,
        server=ServerState("none"),
        port_taken=False,
        current_release=None,
        server_version=newest_version(),
    )


def fields(findings: list[Finding]) -> list[str]:
    assert all(f.severity == Severity.ERROR for f in findings), findings
    return [f.field for f in findings]


def without(model: ModelDir, name: str) -> ModelDir:
    frames = {k: v for k, v in model.frames.items() if k != name}
    return model_dir(model.path, frames, {k: v for k, v in model.sizes.items() if k != name})


def test_a_ready_container_has_no_findings(facts: Facts, plan: TargetPlan) -> None:
    assert judge(facts, plan, TP, SPEC_TOKENS) == []


def test_missing_model_dirs(facts: Facts, plan: TargetPlan) -> None:
    gone = ModelDir(TARGET, False, None, {}, {})
    [finding] = judge(dataclasses.replace(facts, target=gone), plan, TP, SPEC_TOKENS)
    assert (finding.field, finding.actual) == ("target.path", "missing")
    assert TARGET in finding.message

    gone = ModelDir(DRAFTER, False, None, {}, {})
    assert fields(judge(dataclasses.replace(facts, drafter=gone), plan, TP, SPEC_TOKENS)) == [
        "drafter.path"
    ]


def test_a_shard_named_in_the_index_but_not_listed(facts: Facts, plan: TargetPlan) -> None:
    target = without(facts.target, SHARDS[1])

    [finding] = judge(dataclasses.replace(facts, target=target), plan, TP, SPEC_TOKENS)

    assert finding.field == "target.weights"
    assert (finding.expected, finding.actual) == (list(SHARDS), [SHARDS[1]])
    assert "download is incomplete" in finding.message


def test_an_unreadable_index(facts: Facts, plan: TargetPlan) -> None:
    frames = {**facts.target.frames, INDEX_FILE: b'{"weight_map": '}
    target = model_dir(TARGET, frames, facts.target.sizes)

    assert fields(judge(dataclasses.replace(facts, target=target), plan, TP, SPEC_TOKENS)) == [
        f"target.{INDEX_FILE}"
    ]


@pytest.mark.parametrize("role", ["target", "drafter"])
def test_a_weight_file_shorter_than_its_header_says(
    facts: Facts, plan: TargetPlan, weights: Path, tmp_path: Path, role: str
) -> None:
    model: ModelDir = getattr(facts, role)
    name = SHARDS[0] if role == "target" else "model.safetensors"
    full = (weights / name).stat().st_size
    cut = tmp_path / name
    with cut.open("wb") as file:  # a download cut off one byte short (sparse, like the stub)
        file.write(header_prefix(weights / name))
        file.truncate(full - 1)
    truncated = model_dir(model.path, model.frames, {**model.sizes, name: cut.stat().st_size})

    [finding] = judge(dataclasses.replace(facts, **{role: truncated}), plan, TP, SPEC_TOKENS)

    assert finding.field == f"weights.{name}"
    assert (finding.expected, finding.actual) == (full, full - 1)
    assert "truncated" in finding.message


def test_a_drafter_dir_without_weights(facts: Facts, plan: TargetPlan) -> None:
    empty = model_dir(DRAFTER, {}, {"README.md": 5})
    [finding] = judge(dataclasses.replace(facts, drafter=empty), plan, TP, SPEC_TOKENS)
    assert (finding.field, finding.actual) == ("drafter.weights", ["README.md"])


def test_fewer_gpus_than_tensor_parallel(facts: Facts, plan: TargetPlan) -> None:
    one_gpu = dataclasses.replace(facts, gpus=facts.gpus[:1])  # type: ignore[index]
    [finding] = judge(one_gpu, plan, TP, SPEC_TOKENS)
    assert finding.field == "server.tensor_parallel_size"
    assert (finding.expected, finding.actual) == (">= 2", 1)
    assert judge(one_gpu, plan, 1, SPEC_TOKENS) == []


def test_nvidia_smi_failing_is_an_error_quoting_it(facts: Facts, plan: TargetPlan) -> None:
    failed = dataclasses.replace(facts, gpus=None, gpu_error="NVIDIA-SMI has failed")
    [finding] = judge(failed, plan, TP, SPEC_TOKENS)
    assert finding.field == "gpus"
    assert "NVIDIA-SMI has failed" in finding.message


def busy(facts: Facts, apps: list[GpuApp], server: ServerState) -> Facts:
    """GPU 0 with only 1000 MiB free; the apps hold the rest."""
    gpus = [Gpu(0, "GPU-0", 49140, 48140, 1000), *facts.gpus[1:]]  # type: ignore[index]
    return dataclasses.replace(facts, gpus=gpus, gpu_apps=apps, server=server)


def test_gpu_memory_held_by_another_process(facts: Facts, plan: TargetPlan) -> None:
    held = busy(facts, [GpuApp(4242, 48140, "GPU-0", "/usr/bin/python3")], ServerState("none"))

    [finding] = judge(held, plan, TP, SPEC_TOKENS)

    assert (finding.field, finding.actual) == ("gpu[0].memory", 1000)
    # the process nvidia-smi names (--query-compute-apps), with what it holds
    assert finding.message == (
        "GPU 0 has 1000 MiB of 49140 MiB free, used by PID 4242 (/usr/bin/python3, 48140 MiB)"
    )


def test_gpu_memory_held_by_our_own_server_counts_as_available(
    facts: Facts, plan: TargetPlan
) -> None:
    ours = busy(facts, [GpuApp(31337, 48140, "GPU-0")], ServerState("running", 31337))
    assert judge(ours, plan, TP, SPEC_TOKENS) == []

    # A stopped server's PID is not ours any more: whoever holds that memory now is in the way.
    stale = busy(facts, [GpuApp(31337, 48140, "GPU-0")], ServerState("stopped", 31337))
    assert fields(judge(stale, plan, TP, SPEC_TOKENS)) == ["gpu[0].memory"]


def test_memory_a_dead_servers_workers_hold_is_named_and_ended_first(
    facts: Facts, plan: TargetPlan
) -> None:
    """Issue 35: the server died, its workers (its process group) hold the memory: the
    deploy is not refused for it; the switch's stop ends them and waits for the memory."""
    leftover = busy(
        facts, [GpuApp(4243, 48140, "GPU-0")], ServerState("stopped", 4242, leftover=True)
    )

    [finding] = judge(leftover, plan, TP, SPEC_TOKENS)

    assert finding.severity == Severity.WARNING
    assert "used by PID 4243" in finding.message
    assert "the server that died (PID 4242) left its processes holding it" in finding.message


def test_only_other_processes_are_named_and_only_ours_is_freed(
    facts: Facts, plan: TargetPlan
) -> None:
    apps = [GpuApp(31337, 20000, "GPU-0"), GpuApp(4242, 28140, "GPU-0"), GpuApp(7, 9, "GPU-1")]
    shared = busy(facts, apps, ServerState("running", 31337))

    [finding] = judge(shared, plan, TP, SPEC_TOKENS)

    assert finding.actual == 21000
    assert (
        "used by PID 4242 (unnamed, 28140 MiB)" in finding.message
        and "31337" not in (finding.message.split(";")[0])
    )
    # With our server running, its workers may hold memory under PIDs we cannot see:
    # the switch stops it and waits for the memory, so this is a warning, not a stop.
    assert finding.severity == Severity.WARNING
    assert "stopped first" in finding.message


def test_memory_short_with_no_server_of_ours_is_an_error(facts: Facts, plan: TargetPlan) -> None:
    held = busy(facts, [GpuApp(4242, 48140, "GPU-0")], ServerState("none"))
    [finding] = judge(held, plan, TP, SPEC_TOKENS)
    assert finding.severity == Severity.ERROR


def test_gpus_beyond_tensor_parallel_are_not_judged(facts: Facts, plan: TargetPlan) -> None:
    second_full = dataclasses.replace(
        facts,
        gpus=[facts.gpus[0], Gpu(1, "GPU-1", 49140, 49140, 0)],  # type: ignore[index]
    )
    assert judge(second_full, plan, 1, SPEC_TOKENS) == []
    assert fields(judge(second_full, plan, 2, SPEC_TOKENS)) == ["gpu[1].memory"]


def test_port_taken_by_a_process_orch_did_not_start(facts: Facts, plan: TargetPlan) -> None:
    [finding] = judge(dataclasses.replace(facts, port_taken=True), plan, TP, SPEC_TOKENS)
    assert finding.field == "server.port"
    assert f"{plan.address}:{plan.port} is in use" in finding.message


def test_a_port_and_gpus_held_by_another_playbooks_server_name_it_and_its_stop(
    facts: Facts, plan: TargetPlan
) -> None:
    busy = dataclasses.replace(
        facts,
        port_taken=True,
        gpus=[Gpu(0, "GPU-0", 49140, 40000, 9140), Gpu(1, "GPU-1", 49140, 40000, 9140)],
        siblings=[Sibling("qwen-mtp", 4242, plan.port)],
    )
    others = Others(inventory="inv.yaml")

    found = judge(busy, plan, TP, SPEC_TOKENS, others=others)

    assert fields(found) == ["gpu[0].memory", "gpu[1].memory", "server.port"]
    for finding in found:
        assert "qwen-mtp's server (pid 4242), another orch playbook" in finding.message
        assert "`orch stop qwen-mtp -i inv.yaml --limit ct129`" in finding.message
        assert "`orch deploy qwen-dflash -i inv.yaml --limit ct129 --replace qwen-mtp`" in (
            finding.message
        )
    replacing = judge(busy, plan, TP, SPEC_TOKENS, others=Others("qwen-mtp", "inv.yaml"))
    assert {f.severity for f in replacing} == {Severity.WARNING}
    assert "which --replace stops first" in replacing[-1].message
    assert all(f.message.count("probably") == 1 for f in found[:2])  # its PID is not shown
    shown = dataclasses.replace(busy, gpu_apps=[GpuApp(4242, 40000, "GPU-0", "python3")])
    named = judge(shown, plan, TP, SPEC_TOKENS, others=others)[0]
    assert named.message.startswith(
        "GPU 0 has 9140 MiB of 49140 MiB free, used by PID 4242 (python3, 40000 MiB): held by "
        "qwen-mtp's server (pid 4242), another orch playbook on this container: "
    )  # nvidia-smi shows the sibling's PID: no "probably"
    elsewhere = dataclasses.replace(busy, siblings=[Sibling("qwen-mtp", 4242, plan.port + 1)])
    port = judge(elsewhere, plan, TP, SPEC_TOKENS, others=others)[-1]
    assert "a process orch did not start" in port.message  # not the sibling's port


def test_other_deployments_servers_are_read_from_their_frames() -> None:
    manifest = json.dumps({"gate_target": {"port": 8001}}).encode()
    frames = {
        "sibling qwen-mtp": b"running 4242\n",
        "sibling-manifest qwen-mtp": manifest,
        "sibling old": b"running 17\n",
        "current": b"",
    }
    assert parse_siblings(frames) == [Sibling("old", 17, None), Sibling("qwen-mtp", 4242, 8001)]


def test_low_disk(facts: Facts, plan: TargetPlan) -> None:
    low = dataclasses.replace(facts, free_disk_kib=MIN_FREE_DISK_KIB - 1)
    [finding] = judge(low, plan, TP, SPEC_TOKENS)
    assert (finding.field, finding.actual) == ("disk", MIN_FREE_DISK_KIB - 1)
    assert plan.deployment_dir in finding.message
    enough = dataclasses.replace(facts, free_disk_kib=MIN_FREE_DISK_KIB)
    assert judge(enough, plan, TP, SPEC_TOKENS) == []


def test_findings_come_in_a_stable_order(facts: Facts, plan: TargetPlan) -> None:
    everything = dataclasses.replace(
        facts,
        target=without(facts.target, SHARDS[0]),
        gpus=facts.gpus[:1],  # type: ignore[index]
        port_taken=True,
        free_disk_kib=0,
    )
    assert fields(judge(everything, plan, TP, SPEC_TOKENS)) == [
        "target.weights",
        "server.tensor_parallel_size",
        "server.port",
        "disk",
    ]


def test_the_guessed_drafter_config_gives_the_dflash_error(facts: Facts, plan: TargetPlan) -> None:
    guessed = json.loads((DRAFTERS / "guessed_Qwen3.6-27B-DFlash.config.json").read_text())
    guessed_plan = dataclasses.replace(plan, drafter_config=guessed)

    findings = drafter_findings(facts.target, facts.drafter, guessed_plan, SPEC_TOKENS)

    ids = next(f for f in findings if f.field == IDS)
    assert ids.severity == Severity.ERROR
    assert (ids.expected, ids.actual) == ([1, 16, 31, 46, 61], [1, 17, 33, 49, 63])
    assert judge(facts, guessed_plan, TP, SPEC_TOKENS) == findings
    assert drafter_findings(facts.target, facts.drafter, plan, SPEC_TOKENS) == []


def test_a_damaged_target_config_is_a_finding_and_skips_the_dflash_rules(
    facts: Facts, plan: TargetPlan
) -> None:
    frames = {**facts.target.frames, "config.json": b'{"text_config": {"hidden_'}
    damaged = model_dir(TARGET, frames, facts.target.sizes)

    [finding] = judge(dataclasses.replace(facts, target=damaged), plan, TP, SPEC_TOKENS)

    assert finding.severity == Severity.ERROR
    assert "not valid JSON" in finding.message and f"{TARGET}/config.json" in finding.message


def test_a_damaged_config_json_in_the_drafter_download_does_not_block(
    facts: Facts, plan: TargetPlan
) -> None:
    damaged = b'{"dflash_config": {"target_'
    frames = {**facts.drafter.frames, "config.json": damaged}
    drafter = model_dir(DRAFTER, frames, {**facts.drafter.sizes, "config.json": len(damaged)})

    findings = judge(dataclasses.replace(facts, drafter=drafter), plan, TP, SPEC_TOKENS)

    assert [f for f in findings if f.severity == Severity.ERROR] == []


def test_the_server_version_judges_the_release(facts: Facts, plan: TargetPlan) -> None:
    old = judge(dataclasses.replace(facts, server_version="0.24.0"), plan, TP, SPEC_TOKENS)
    # the per-request figures the gate reads by default need 0.29.0; then the drafter's own
    assert [f.field for f in old] == ["gate.acceptance_source", "server.version", "server.version"]
    assert all("vLLM 0.24.0" in f.message for f in old)

    unknown = dataclasses.replace(
        facts, server_version=None, server_version_error="exit 127: vllm: not found"
    )
    [warning] = judge(unknown, plan, TP, SPEC_TOKENS)
    assert warning.severity == Severity.WARNING
    assert "exit 127: vllm: not found" in warning.message


def test_the_commands_that_free_a_port_name_a_playbook_given_by_path_by_its_path(
    facts: Facts, plan: TargetPlan
) -> None:
    """A hint runs as printed: the playbook as given (quoted), the inventory quoted."""
    busy = dataclasses.replace(
        facts, port_taken=True, siblings=[Sibling("qwen-mtp", 4242, plan.port)]
    )
    others = Others(inventory="my inv.yaml", playbook="books/my dflash.yaml")

    [finding] = judge(busy, plan, TP, SPEC_TOKENS, others=others)

    where = "-i 'my inv.yaml' --limit ct129"
    assert f"`orch stop qwen-mtp {where}`" in finding.message
    assert f"`orch deploy 'books/my dflash.yaml' {where} --replace qwen-mtp`" in finding.message


def test_a_printed_command_names_a_shipped_playbook_by_name_and_another_by_path(
    tmp_path: Path,
) -> None:
    shipped = load_playbook(find_playbook("qwen-dflash"))
    assert command_name(shipped) == "qwen-dflash"
    copy = tmp_path / "qwen-dflash.yaml"
    copy.write_text(Path(shipped.source).read_text())
    assert command_name(load_playbook(copy)) == str(copy)


def test_preflight_says_what_it_waits_for_while_the_servers_own_check_runs() -> None:
    """The other facts read, the server's dry run still running: `progress` hears what
    is waited for, until the check answers (here: once that is heard, it answers)."""
    fleet = Fleet()
    container, plan = fleet.containers["ct200"], fleet.plans["ct200"]
    asked, answered = threading.Event(), threading.Event()
    heard: list[str] = []

    def slow_check(argv: Sequence[str], stdin: bytes | None) -> Result:
        asked.set()
        answered.wait(timeout=30)
        return Result(tuple(argv), 127, b"", b"python: not found")

    container.transport.on("validate_launch", slow_check)

    waited = f"waiting for {plan.vllm}'s own check of the launch (it imports vLLM)"

    def progress(what: str) -> None:
        heard.append(what)
        if what == waited:
            answered.set()

    facts = gather(container.transport, plan, "nvidia-smi", progress=progress)

    assert asked.is_set()
    assert heard[: heard.index(waited) + 1] == [
        "read facts",
        f"server check ({plan.vllm})",
        waited,
    ]
    assert facts.server_check is not None and facts.server_check.unavailable
