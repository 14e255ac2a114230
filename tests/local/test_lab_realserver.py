"""The real-server lab's own parts, without the real server: the container launcher (run
with a stand-in Python that prints what it was given), the record it leaves, stopping by
process group with the /dev/shm files left behind, the venv check, and the tiny models'
configs as orch's own checks judge them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.drafters.kinds import CheckInputs, get_kind
from orchestrator.errors import InputError
from orchestrator.lab import realserver, tiny_cache, tiny_models
from orchestrator.lab.acceptance import draft_model_profile
from orchestrator.lab.paths import ContainerPaths, pid_alive, process_start, server_records
from orchestrator.lab.vllm_standin import same_weights

ROOT = Path(__file__).resolve().parent.parent.parent


def fake_venv(root: Path) -> Path:
    """A venv whose python prints its arguments as JSON and then sleeps when serving."""
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, time\n"
        "print(json.dumps({'argv': sys.argv[1:], 'pid': os.getpid(),\n"
        "    'tmpdir': os.environ['TMPDIR'], 'host_ip': os.environ['VLLM_HOST_IP']}), flush=True)\n"
        "if 'serve' in sys.argv: time.sleep(60)\n"
    )
    python.chmod(0o755)
    (venv / "bin" / "vllm").write_text("# the console script\n")
    return venv


def container(root: Path) -> ContainerPaths:
    paths = ContainerPaths(root / "hosts" / "pve1" / "containers" / "200")
    paths.rootfs.mkdir(parents=True)
    return paths


@pytest.mark.lab
def test_the_launcher_passes_version_through_with_the_labs_environment(tmp_path: Path) -> None:
    venv, paths = fake_venv(tmp_path), container(tmp_path)
    realserver.write_launcher(paths, venv)
    done = subprocess.run([str(paths.vllm), "--version"], capture_output=True, text=True)
    printed = json.loads(done.stdout)
    assert printed["argv"] == [str(venv / "bin" / "vllm"), "--version"]
    assert (printed["tmpdir"], printed["host_ip"]) == (
        str(realserver.tmp_dir(paths)),
        "127.0.0.1",
    )
    # vLLM's ZMQ sockets go there: a Unix socket path holds at most 107 bytes.
    assert len(f"{realserver.tmp_dir(paths)}/{'x' * 36}") < 107
    assert server_records(paths) == []


@pytest.mark.lab
def test_serve_records_pid_group_and_start_time_and_adds_the_cpu_flags_first(
    tmp_path: Path,
) -> None:
    venv, paths = fake_venv(tmp_path), container(tmp_path)
    realserver.write_launcher(paths, venv)
    server = subprocess.Popen(
        [str(paths.vllm), "serve", "/models/tiny target", "--port", "8000"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        printed = json.loads(server.stdout.readline())
        assert printed["argv"] == [
            str(venv / "bin" / "vllm"),
            "serve",
            "/models/tiny target",
            *realserver.SERVE_ARGS,
            "--port",
            "8000",
        ]
        (record,) = server_records(paths)
        assert record == {
            "pid": server.pid,
            "pgid": server.pid,
            "start": process_start(server.pid),
            "server": "vllm",
            "gpu_memory_mib": {},
        }
        assert printed["pid"] == server.pid  # the launcher exec'd: one process
        assert realserver.stop_servers([record], timeout=5) == [server.pid]
        server.wait(timeout=5)
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(realserver.tmp_dir(paths), ignore_errors=True)
    assert server_records(paths) == []


def test_a_reused_pid_is_not_the_recorded_server(tmp_path: Path) -> None:
    paths = container(tmp_path)
    paths.servers_dir.mkdir(parents=True)
    start = process_start(os.getpid())
    assert start is not None
    record = {"pid": os.getpid(), "pgid": os.getpid(), "start": start - 1, "server": "vllm"}
    (paths.servers_dir / f"{os.getpid()}.json").write_text(json.dumps(record))
    assert server_records(paths) == []


SHM_HOLDER = """
import os, sys, time
from multiprocessing import shared_memory
segment = shared_memory.SharedMemory(create=True, size=4096)
print(segment.name, flush=True)
if os.fork() == 0:
    time.sleep(60)
time.sleep(60)
"""


@pytest.mark.lab
def test_stopping_a_server_ends_its_group_and_removes_the_shm_it_held() -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", SHM_HOLDER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None
        shm = Path("/dev/shm") / holder.stdout.readline().strip().lstrip("/")
        assert shm.exists()
        members = realserver.group_members(holder.pid)
        assert len(members) >= 2  # the holder, its fork (and Python's resource tracker)
        record = {"pid": holder.pid, "pgid": holder.pid, "start": process_start(holder.pid)}
        realserver.stop_servers([record], timeout=2)
        deadline = time.monotonic() + 5
        while any(pid_alive(p) for p in members) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in members if pid_alive(p)]
        assert not shm.exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_missing_venv_names_the_command_that_makes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(realserver.VENV_ENV, str(tmp_path / "nothing"))
    with pytest.raises(InputError, match=r"run 'scripts/setup-vllm.sh'"):
        realserver.require_venv()


def test_the_tiny_dflash_drafter_passes_orchs_dflash_rules() -> None:
    shapes = tiny_models.dflash_shapes()
    inputs = CheckInputs(
        tiny_models.dflash_config(),
        tiny_models.target_config(),
        tokenizer=tiny_models.tokenizer_config(),
        tensors={name: {"dtype": "F32", "shape": shape} for name, shape in shapes.items()},
    )
    errors = [f for f in get_kind("dflash").check(inputs) if f.severity.value == "error"]
    assert errors == []


def test_lab_dflash_renders_the_config_the_lab_ships_with_tiny_dflash() -> None:
    playbook = yaml.safe_load((ROOT / "playbooks" / "lab-dflash.yaml").read_text())
    assert playbook["drafter"]["overrides"] == tiny_models.dflash_config()


def test_the_stand_in_lab_gets_the_tiny_models_as_stubs(tmp_path: Path) -> None:
    paths = container(tmp_path)
    models = paths.rootfs / "opt" / "models"
    tiny_cache.write_stubs(paths, models)
    target = json.loads((models / "tiny-target" / "config.json").read_text())
    assert target == tiny_models.target_config()
    assert (models / "tiny-draft-other" / "tokenizer_config.json").exists()
    assert json.loads(paths.truth("tiny-dflash").read_text()) == tiny_models.dflash_config()


def test_the_stand_in_accepts_every_draft_of_the_target_drafting_for_itself(
    tmp_path: Path,
) -> None:
    target, other, release = tmp_path / "target", tmp_path / "other", tmp_path / "release"
    for directory in (target, other, release):
        directory.mkdir()
    (target / "model.safetensors").write_bytes(b"weights")
    (other / "model.safetensors").write_bytes(b"weights")
    (release / "model.safetensors").symlink_to(target / "model.safetensors")
    assert same_weights({"model": str(release)}, target)
    assert not same_weights({"model": str(other)}, target)
    assert draft_model_profile(True, 3) == [1.0, 1.0, 1.0]
    assert max(draft_model_profile(False, 3)) < 0.5
