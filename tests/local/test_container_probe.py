"""Preflight's probes: everything it reads at once, a model dir, the small facts, run under
/bin/sh."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import pytest
from shelltools import (
    run,
)

from orchestrator.container import verdict
from orchestrator.container.probe import (
    DRAFTER,
    TARGET,
    LaunchRead,
    parse_vllm_version,
    prefixed,
    preflight_facts,
    read_vllm_version,
    target_facts,
)
from orchestrator.container.probe import read_model_dir as read_model_dir_script
from orchestrator.container.shell import (
    parse_frames,
    parse_listing,
)
from orchestrator.drafters.modelfiles import (
    CONFIG_FILE,
    SAFETENSORS_HEADER_LIMIT,
    TOKENIZER_CONFIG_FILE,
    model_files_from_bytes,
    read_model_dir,
    write_safetensors_stub,
)
from orchestrator.drafters.profiles import target_files
from orchestrator.layout import Layout
from orchestrator.preflight import INDEX_FILE

QWEN36 = "z-lab/Qwen3.6-27B-DFlash"


def safetensors_prefix(path: Path) -> bytes:
    """The real header of a safetensors file: its first 8 + N bytes."""
    with path.open("rb") as file:
        first8 = file.read(8)
        return first8 + file.read(struct.unpack("<Q", first8)[0])


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A target-shaped dir: published config and tokenizer, an index, sparse shards, a link."""
    directory = tmp_path / "models" / "Qwen 3.6"
    directory.mkdir(parents=True)
    for name, data in target_files(QWEN36).items():
        (directory / name).write_bytes(data)
    shards = {
        "model-00001-of-00002.safetensors": {"embed.weight": ("BF16", [4096, 512])},
        "model-00002-of-00002.safetensors": {"lm_head.weight": ("F32", [512, 4096])},
    }
    for name, tensors in shards.items():
        write_safetensors_stub(directory / name, tensors)
    weight_map = {t: name for name, tensors in shards.items() for t in tensors}
    (directory / INDEX_FILE).write_text(json.dumps({"weight_map": weight_map}))
    (directory / "notes with spaces.txt").write_text("x")
    elsewhere = tmp_path / "elsewhere.safetensors"
    write_safetensors_stub(elsewhere, {"norm.weight": ("F16", [512])})
    (directory / "linked.safetensors").symlink_to(elsewhere)
    (directory / "subdir").mkdir()
    return directory


def test_read_model_dir_frames_listing_wanted_files_and_real_headers(model_dir: Path) -> None:
    names = [CONFIG_FILE, TOKENIZER_CONFIG_FILE, INDEX_FILE, "generation_config.json"]

    done = run(read_model_dir_script(str(model_dir), names, SAFETENSORS_HEADER_LIMIT))

    assert done.returncode == 0, done.stderr
    frames = parse_frames(done.stdout)
    listing = parse_listing(frames.pop(".listing").decode())
    files = [p for p in model_dir.iterdir() if p.is_file()]
    assert listing == {p.name: p.stat().st_size for p in files}
    weights = sorted(p for p in files if p.name.endswith(".safetensors"))
    assert sorted(frames) == sorted(
        [CONFIG_FILE, TOKENIZER_CONFIG_FILE, INDEX_FILE] + [p.name for p in weights]
    )
    for name in (CONFIG_FILE, TOKENIZER_CONFIG_FILE, INDEX_FILE):
        assert frames[name] == (model_dir / name).read_bytes()
    for path in weights:
        assert frames[path.name] == safetensors_prefix(path)
        assert len(frames[path.name]) < path.stat().st_size
    # Read back over the wire or read locally, the model files come out the same.
    assert model_files_from_bytes(str(model_dir), frames) == read_model_dir(model_dir)


def test_read_model_dir_bounds_each_header_by_the_limit(model_dir: Path) -> None:
    (model_dir / "huge.safetensors").write_bytes(struct.pack("<Q", 2**63 + 5) + b"{}" * 64)
    (model_dir / "short.safetensors").write_bytes(b"abc")
    real = safetensors_prefix(model_dir / "model-00001-of-00002.safetensors")

    small_limit = len(real) - 9
    done = run(read_model_dir_script(str(model_dir), [], small_limit))

    assert done.returncode == 0, done.stderr
    frames = parse_frames(done.stdout)
    assert frames["model-00001-of-00002.safetensors"] == real[:8]
    assert frames["huge.safetensors"] == (model_dir / "huge.safetensors").read_bytes()[:8]
    assert frames["short.safetensors"] == b"abc"


def test_read_model_dir_of_a_missing_dir_exits_3(tmp_path: Path) -> None:
    done = run(read_model_dir_script(str(tmp_path / "nope"), [CONFIG_FILE], 100))
    assert (done.returncode, done.stdout) == (3, b"")


def test_read_model_dir_without_weights_lists_and_exits_0(tmp_path: Path) -> None:
    (tmp_path / CONFIG_FILE).write_bytes(b"{}")

    done = run(read_model_dir_script(str(tmp_path), [CONFIG_FILE, INDEX_FILE], 100))

    assert done.returncode == 0, done.stderr
    assert parse_frames(done.stdout) == {".listing": b"2 config.json\n", CONFIG_FILE: b"{}"}


def test_target_facts_frame_gpus_disk_server_and_current(tmp_path: Path) -> None:
    fake_smi = tmp_path / "nvidia smi"
    fake_smi.write_text('#!/bin/sh\necho "$1"\nexit 3\n')
    fake_smi.chmod(0o755)
    deployment = tmp_path / "not yet" / "deployed"
    done = run(target_facts(Layout(str(deployment)), str(fake_smi)))
    assert done.returncode == 0, done.stderr
    frames = parse_frames(done.stdout)

    assert frames["gpus"] == b"--query-gpu=index,uuid,memory.total,memory.used,memory.free,name\n"
    assert (frames["gpus.rc"], frames["apps.rc"]) == (b"3", b"3")
    fs = os.statvfs(tmp_path)
    assert abs(int(frames["disk"]) - fs.f_bavail * fs.f_frsize // 1024) <= 64 * 1024
    assert (frames["server"], frames["current"]) == (b"none\n", b"")

    deployment.mkdir(parents=True)
    (deployment / "server.pid").write_text("")  # a failed write leaves it empty
    (deployment / "current").symlink_to("releases/abc")
    argv = target_facts(Layout(str(deployment)), "/nonexistent")
    frames = parse_frames(run(argv).stdout)
    assert frames["gpus.rc"] == b"127"
    assert (frames["server"], frames["current"]) == (b"none\n", b"releases/abc\n")


def version_frames(vllm: Path) -> tuple[str | None, str]:
    done = run(read_vllm_version(str(vllm)))
    return parse_vllm_version(done.stdout.decode(), done.returncode)


def test_the_vllm_version_or_its_package_metadata_is_read(tmp_path: Path) -> None:
    bin_dir = tmp_path / "venv dir" / "bin"
    bin_dir.mkdir(parents=True)
    vllm = bin_dir / "vllm"
    vllm.write_text("#!/bin/sh\necho 'INFO 12-02 [__init__.py] loading'\necho 0.27.1\n")
    vllm.chmod(0o755)
    assert version_frames(vllm) == ("0.27.1", "")

    # A vllm without --version: the Python beside it answers from the package metadata.
    vllm.write_text("#!/bin/sh\necho 'usage: vllm serve' >&2\nexit 2\n")
    python = bin_dir / "python"
    python.write_text(
        "#!/bin/sh\n"
        '[ "$1" = -c ] && case "$2" in *importlib.metadata*) echo 0.19.1; exit 0;; esac\n'
        "exit 9\n"
    )
    python.chmod(0o755)
    assert version_frames(vllm) == ("0.19.1", "")

    python.unlink()
    version, why = version_frames(vllm)
    assert version is None and "exit 127" in why


def test_preflight_facts_read_everything_in_one_script(model_dir: Path, tmp_path: Path) -> None:
    """Both model dirs (a missing one said so), the small facts, the install's identity
    (its dist-info RECORD, the console script and its Python) and the kept verdict."""
    venv = tmp_path / "venv"  # a #! line ends at its first space
    record = venv / "lib/python3.12/site-packages/vllm-0.32.0.dist-info/RECORD"
    record.parent.mkdir(parents=True)
    record.write_text("vllm/__init__.py,,\n")
    (venv / "bin").mkdir()
    (venv / "bin/python").symlink_to(sys.executable)
    vllm = venv / "bin/vllm"
    vllm.write_text(f"#!{venv}/bin/python\nimport vllm\n")
    layout = Layout(str(tmp_path / "state" / "qwen"))
    names = [CONFIG_FILE, INDEX_FILE]
    read = LaunchRead(str(model_dir), str(tmp_path / "gone"), names, 100, str(vllm))
    argv = preflight_facts(layout, "/nonexistent", read)
    done = run(argv)
    assert done.returncode == 0, done.stderr
    frames = parse_frames(done.stdout)
    target = prefixed(frames, TARGET)
    assert target is not None and target[CONFIG_FILE] == (model_dir / CONFIG_FILE).read_bytes()
    assert "linked.safetensors" in parse_listing(target[".listing"].decode())
    assert prefixed(frames, DRAFTER) is None
    assert (frames["gpus.rc"], frames["server"]) == (b"127", b"none\n")
    install = frames[verdict.INSTALL].decode().splitlines()
    assert [line.rsplit(" ", 2)[0] for line in install] == [
        str(record),
        str(vllm),
        f"{venv}/bin/python",
    ]
    assert install[0].split()[-2] == str(record.stat().st_size)
    assert verdict.VERDICT not in frames

    Path(layout.root).mkdir(parents=True)
    Path(layout.server_check).write_text('{"kept": 1}')
    frames = parse_frames(run(argv).stdout)
    assert frames[verdict.VERDICT] == b'{"kept": 1}'


def test_an_install_without_a_record_has_no_identity(tmp_path: Path) -> None:
    vllm = tmp_path / "vllm"
    vllm.write_text("#!/bin/sh\n")
    read = LaunchRead(str(tmp_path), None, [], 1, str(vllm))
    argv = preflight_facts(Layout(str(tmp_path / "d")), "/x", read)
    assert parse_frames(run(argv).stdout)[verdict.INSTALL] == b""
