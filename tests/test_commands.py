"""Command builders: exact argv for representative builders, then the scripts run for real.

The scripts run locally under /bin/sh, argv exactly as built (never through
another shell), in a temporary directory. Every process a test starts is
killed by PID and start time when the test ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import commands
from orchestrator.drafters.modelfiles import (
    CONFIG_FILE,
    SAFETENSORS_HEADER_LIMIT,
    TOKENIZER_CONFIG_FILE,
    model_files_from_bytes,
    read_model_dir,
    write_safetensors_stub,
)
from orchestrator.drafters.profiles import target_files
from orchestrator.facts import (
    ServerState,
    parse_frames,
    parse_listing,
    parse_server_state,
    parse_started,
    parse_status_report,
    parse_vllm_version,
)
from orchestrator.layout import Layout
from orchestrator.preflight import INDEX_FILE
from orchestrator.state import audit_line

QWEN36 = "z-lab/Qwen3.6-27B-DFlash"
HOSTILE_NAMES = [
    "it's $(touch pwned).json",
    "a;touch pwned;b",
    "`touch pwned`",
    'say "hi" & touch pwned',
    "*",
    "-rf",
    "tab\there $HOME",
]


def run(
    argv: list[str], stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, input=stdin, capture_output=True, cwd=cwd, timeout=30, check=False)


def tree(root: Path) -> set[str]:
    """Every path under `root`, relative, links not followed."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat, or None when there is no such process."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat_line.rsplit(")", 1)[1].split()[19]


def proc_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def running(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z", "X")


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {condition}")
        time.sleep(0.01)


class Processes:
    """The processes a test started, killed at the end by PID (if the start time still matches)."""

    def __init__(self) -> None:
        self.recorded: list[tuple[int, str | None]] = []
        self.children: list[subprocess.Popen[bytes]] = []

    def track(self, pid: int) -> None:
        self.recorded.append((pid, start_time(pid)))

    def spawn(self, *argv: str) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(argv)
        self.children.append(child)
        return child

    def cleanup(self) -> None:
        for pid, started in self.recorded:
            if started is not None and start_time(pid) == started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for child in self.children:
            child.kill()
            child.wait(timeout=10)


@pytest.fixture
def processes() -> Iterator[Processes]:
    tracked = Processes()
    try:
        yield tracked
    finally:
        tracked.cleanup()


# -- exact argv --------------------------------------------------------------------------------


def test_write_file_quotes_every_hostile_part_of_the_path() -> None:
    argv = commands.write_file("/srv/my models/it's $(x);`y`.json", "0600")

    assert argv == [
        "/bin/sh",
        "-c",
        "set -e; umask 022; mkdir -p '/srv/my models'; "
        """tmp=$(mktemp '/srv/my models/.it'"'"'s $(x);`y`.json.XXXXXX'); """
        """trap 'rm -f "$tmp"' EXIT; cat > "$tmp"; sync "$tmp"; chmod 0600 "$tmp"; """
        """mv -f "$tmp" '/srv/my models/it'"'"'s $(x);`y`.json'; trap - EXIT; """
        "sync '/srv/my models'",
    ]


def test_gpu_query_passes_the_path_as_one_argument() -> None:
    assert commands.gpu_query("/opt/nv smi") == [
        "/opt/nv smi",
        "--query-gpu=index,uuid,memory.total,memory.used,memory.free",
        "--format=csv,noheader,nounits",
    ]


def test_point_link_and_lock_scripts() -> None:
    assert commands.point_link("/d d/cur;rm", "releases/ab'c") == [
        "/bin/sh",
        "-c",
        """set -e; ln -sfn 'releases/ab'"'"'c' '/d d/cur;rm'.tmp; """
        "mv -Tf '/d d/cur;rm'.tmp '/d d/cur;rm'",
    ]
    assert commands.acquire_lock("/var/lib/orch/q/lock", '{"user": "o\'brien"}') == [
        "/bin/sh",
        "-c",
        "mkdir -p /var/lib/orch/q || exit 2\n"
        "if mkdir /var/lib/orch/q/lock 2>/dev/null; "
        """then printf %s '{"user": "o'"'"'brien"}' > /var/lib/orch/q/lock/owner.json; """
        "exit 0; fi\n"
        "[ -d /var/lib/orch/q/lock ] || { mkdir /var/lib/orch/q/lock; exit 2; }\n"
        "cat /var/lib/orch/q/lock/owner.json 2>/dev/null; exit 1",
    ]
    assert commands.release_lock("/var/lib/orch/q/lock") == [
        "/bin/sh",
        "-c",
        "rm -f /var/lib/orch/q/lock/owner.json; "
        "rmdir /var/lib/orch/q/lock/takeover /var/lib/orch/q/lock 2>/dev/null || true",
    ]
    assert commands.release_lock("/l/lock", "run 1")[2].startswith(
        "grep -qF 'run 1' /l/lock/owner.json 2>/dev/null || exit 0\n"
    )


def test_a_lock_that_cannot_be_made_is_not_reported_as_held(tmp_path: Path) -> None:
    blocker = tmp_path / "deployment"
    blocker.write_text("a file where the deployment dir should be")
    done = run(commands.acquire_lock(str(blocker / "lock"), "{}"))
    assert done.returncode == 2
    assert done.stderr


def test_release_lock_leaves_another_runs_lock(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    assert run(commands.acquire_lock(str(lock), '{"run_id": "B"}')).returncode == 0
    run(commands.release_lock(str(lock), "A"))
    assert (lock / "owner.json").read_text() == '{"run_id": "B"}'
    run(commands.release_lock(str(lock), "B"))
    assert not lock.exists()


def test_release_removal_and_log_scripts() -> None:
    assert commands.remove_releases("/d/releases", ["abc", "x y; rm -rf /", "*"]) == [
        "/bin/sh",
        "-c",
        "rm -rf -- /d/releases/abc '/d/releases/x y; rm -rf /' '/d/releases/*'",
    ]
    assert commands.append_line("/d/audit.log", "it's $HOME") == [
        "/bin/sh",
        "-c",
        """printf '%s\\n' 'it'"'"'s $HOME' >> /d/audit.log""",
    ]


# -- write_file --------------------------------------------------------------------------------


def test_write_file_replaces_by_rename_with_mode_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "release" / "serve.sh"
    target.parent.mkdir()
    target.write_bytes(b"old\n")
    with target.open("rb") as old:
        done = run(commands.write_file(str(target), "0755"), stdin=b"new\x00\n\xff")

        assert done.returncode == 0, done.stderr
        assert old.read() == b"old\n"  # the old inode is intact: replaced, not overwritten
    assert target.read_bytes() == b"new\x00\n\xff"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert tree(tmp_path) == {"release", "release/serve.sh"}


def test_write_file_creates_missing_directories_with_the_default_mode(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "config.json"

    done = run(commands.write_file(str(target)), stdin=b"{}")

    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"{}"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert tree(tmp_path) == {"a", "a/b", "a/b/config.json"}


def test_a_failed_write_removes_its_temp_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "config.json"
    target.write_bytes(b"old")

    done = run(commands.write_file(str(target), "not-a-mode"), stdin=b"new")

    assert done.returncode != 0
    assert target.read_bytes() == b"old"
    assert tree(tmp_path) == {"config.json"}


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_path_creates_exactly_that_file(tmp_path: Path, name: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    target = tmp_path / "my models $(touch pwned)" / name

    done = run(commands.write_file(str(target)), stdin=b"data", cwd=cwd)

    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"data"
    assert tree(tmp_path) == {"cwd", target.parent.name, f"{target.parent.name}/{name}"}


# -- read_files and read_model_dir ---------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(contents=st.lists(st.binary(max_size=300), min_size=1, max_size=len(HOSTILE_NAMES)))
def test_read_files_frames_round_trip_any_bytes_and_skip_missing_files(
    tmp_path_factory: pytest.TempPathFactory, contents: list[bytes]
) -> None:
    directory = tmp_path_factory.mktemp("files")
    written = {}
    for name, data in zip(HOSTILE_NAMES, contents, strict=False):
        (directory / name).write_bytes(data)
        written[str(directory / name)] = data
    missing = [str(directory / "missing"), str(directory / "no such dir" / "x")]

    done = run(commands.read_files([missing[0], *written, missing[1]]), cwd=directory)

    assert done.returncode == 0, done.stderr
    assert parse_frames(done.stdout) == written
    assert tree(directory) == {Path(p).name for p in written}


def test_read_files_of_nothing_prints_nothing() -> None:
    done = run(commands.read_files([]))
    assert (done.returncode, done.stdout) == (0, b"")


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

    done = run(commands.read_model_dir(str(model_dir), names, SAFETENSORS_HEADER_LIMIT))

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
    done = run(commands.read_model_dir(str(model_dir), [], small_limit))

    assert done.returncode == 0, done.stderr
    frames = parse_frames(done.stdout)
    assert frames["model-00001-of-00002.safetensors"] == real[:8]
    assert frames["huge.safetensors"] == (model_dir / "huge.safetensors").read_bytes()[:8]
    assert frames["short.safetensors"] == b"abc"


def test_read_model_dir_of_a_missing_dir_exits_3(tmp_path: Path) -> None:
    done = run(commands.read_model_dir(str(tmp_path / "nope"), [CONFIG_FILE], 100))
    assert (done.returncode, done.stdout) == (3, b"")


def test_read_model_dir_without_weights_lists_and_exits_0(tmp_path: Path) -> None:
    (tmp_path / CONFIG_FILE).write_bytes(b"{}")

    done = run(commands.read_model_dir(str(tmp_path), [CONFIG_FILE, INDEX_FILE], 100))

    assert done.returncode == 0, done.stderr
    assert parse_frames(done.stdout) == {".listing": b"2 config.json\n", CONFIG_FILE: b"{}"}


# -- the deploy lock -----------------------------------------------------------------------------


def test_first_mkdir_wins_the_lock_and_the_second_sees_the_owner(tmp_path: Path) -> None:
    lock = str(tmp_path / "deploy it's" / "lock")
    first, second = '{"run_id": "a", "user": "o\'brien"}', '{"run_id": "b"}'

    won = run(commands.acquire_lock(lock, first))
    lost = run(commands.acquire_lock(lock, second))

    assert (won.returncode, won.stdout) == (0, b"")
    assert (lost.returncode, lost.stdout.decode()) == (1, first)
    assert run(commands.release_lock(lock)).returncode == 0
    assert not Path(lock).exists()
    assert run(commands.acquire_lock(lock, second)).returncode == 0
    assert Path(lock, "owner.json").read_text() == second


def test_concurrent_acquires_have_exactly_one_winner(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    racers = [
        subprocess.Popen(commands.acquire_lock(lock, f'{{"n": {n}}}'), stdout=subprocess.PIPE)
        for n in range(8)
    ]
    codes = [racer.wait(timeout=30) for racer in racers]
    for racer in racers:
        racer.stdout.close()  # type: ignore[union-attr]

    assert sorted(codes) == [0] + [1] * 7
    winner = codes.index(0)
    assert json.loads(Path(lock, "owner.json").read_text()) == {"n": winner}


def test_take_over_replaces_only_the_stale_owner_it_was_given(tmp_path: Path) -> None:
    lock = str(tmp_path / "it's" / "lock")
    stale, mine, theirs = '{"run_id": "dead"}', '{"run_id": "me"}', '{"run_id": "other"}'
    assert run(commands.acquire_lock(lock, stale)).returncode == 0

    assert run(commands.take_over_lock(lock, theirs, mine)).returncode == 1
    assert Path(lock, "owner.json").read_text() == stale
    assert run(commands.take_over_lock(lock, stale, mine)).returncode == 0
    assert Path(lock, "owner.json").read_text() == mine
    again = run(commands.take_over_lock(lock, stale, theirs))
    assert (again.returncode, again.stdout.decode()) == (1, mine)
    assert sorted(p.name for p in Path(lock).iterdir()) == ["owner.json"]
    run(commands.release_lock(lock, "me"))
    assert not Path(lock).exists()


def test_concurrent_take_overs_of_one_stale_owner_have_exactly_one_winner(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    stale = '{"run_id": "dead"}'
    assert run(commands.acquire_lock(lock, stale)).returncode == 0
    racers = [
        subprocess.Popen(
            commands.take_over_lock(lock, stale, f'{{"n": {n}}}'), stdout=subprocess.DEVNULL
        )
        for n in range(8)
    ]
    codes = [racer.wait(timeout=30) for racer in racers]

    assert sorted(codes) == [0] + [1] * 7
    assert json.loads(Path(lock, "owner.json").read_text()) == {"n": codes.index(0)}


def test_releasing_a_lock_nobody_holds_succeeds(tmp_path: Path) -> None:
    assert run(commands.release_lock(str(tmp_path / "lock"))).returncode == 0


# -- the server process --------------------------------------------------------------------------


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    directory = tmp_path / "deploy it's $(x)"
    directory.mkdir()
    return directory


def start_release(deployment: Path, release: str) -> list[str]:
    """The argv that starts `releases/<release>/serve.sh`, its log in the release."""
    layout = Layout(str(deployment))
    return commands.start_server(
        f"{layout.release(release)}/serve.sh",
        layout.release_log(release),
        layout.server_pid,
        layout.server_log,
        Layout.log_link_target(release),
    )


def start(deployment: Path, launch: str, processes: Processes, release: str = "r1") -> int:
    script = deployment / "releases" / release / "serve.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(launch)
    done = run(start_release(deployment, release))
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    processes.track(pid)
    return pid


def state(deployment: Path) -> ServerState:
    done = run(commands.server_state(str(deployment / "server.pid")))
    assert done.returncode == 0, done.stderr
    return parse_server_state(done.stdout.decode())


def stop(deployment: Path, timeout: float = 5.0) -> str:
    done = run(commands.stop_server(str(deployment / "server.pid"), timeout))
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def test_a_log_link_that_cannot_be_made_starts_nothing(deployment: Path) -> None:
    (deployment / "server.log" / "in the way").mkdir(parents=True)
    script = deployment / "releases" / "r1" / "serve.sh"
    script.parent.mkdir(parents=True)
    script.write_text("exec sleep 60\n")
    done = run(start_release(deployment, "r1"))
    assert done.returncode == 1
    assert not (deployment / "server.pid").exists()
    assert not (deployment / "releases" / "r1" / "server.log").exists()


def test_start_detaches_records_pid_and_start_time_then_stop_terminates(
    deployment: Path, processes: Processes
) -> None:
    pid = start(deployment, "echo started\nexec sleep 60\n", processes)

    pid_file = (deployment / "server.pid").read_text()
    assert pid_file == f"{pid} {start_time(pid)}\n"
    wait_until(lambda: (deployment / "server.log").read_text() == "started\n")
    assert os.getsid(pid) == pid and os.getpgid(pid) == pid
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    assert os.readlink(f"/proc/{pid}/fd/1") == str(deployment / "releases/r1/server.log")
    assert os.readlink(deployment / "server.log") == "releases/r1/server.log"
    assert state(deployment) == ServerState("running", pid)

    assert stop(deployment) == f"stopped {pid}"

    assert not running(pid)
    assert not (deployment / "server.pid").exists()
    assert state(deployment) == ServerState("none")
    assert stop(deployment) == "none"


def start_with_worker(deployment: Path, worker: str, processes: Processes) -> tuple[int, int]:
    """A server whose launch script leaves a worker process in its group, as vLLM does."""
    launch = f"{worker} &\necho $! > worker.pid\nexec sleep 60\n"
    pid = start(deployment, f"cd {commands.q(str(deployment))}\n{launch}", processes)
    worker_file = deployment / "worker.pid"
    wait_until(lambda: worker_file.is_file() and worker_file.read_text().endswith("\n"))
    worker_pid = int(worker_file.read_text())
    processes.track(worker_pid)
    return pid, worker_pid


def test_stop_terminates_the_whole_process_group(deployment: Path, processes: Processes) -> None:
    pid, worker = start_with_worker(deployment, "sleep 60", processes)
    assert os.getpgid(worker) == pid

    assert stop(deployment) == f"stopped {pid}"

    assert not running(pid)
    wait_until(lambda: not running(worker), timeout=0.5)


def test_a_worker_ignoring_sigterm_is_killed_though_its_leader_exited(
    deployment: Path, processes: Processes
) -> None:
    """vLLM's workers hold the GPU memory: stop returns only once the whole group is gone."""
    pid, worker = start_with_worker(deployment, "sh -c 'trap \"\" TERM; exec sleep 60'", processes)
    wait_until(lambda: Path(f"/proc/{worker}/comm").read_text() == "sleep\n")

    assert stop(deployment, timeout=0.3) == f"killed {pid}"

    assert not running(pid)
    assert not running(worker)


def test_a_process_ignoring_sigterm_is_killed_after_the_timeout(
    deployment: Path, processes: Processes
) -> None:
    pid = start(deployment, "trap '' TERM\nexec sleep 60\n", processes)
    wait_until(lambda: Path(f"/proc/{pid}/comm").read_text() == "sleep\n")

    began = time.monotonic()
    assert stop(deployment, timeout=0.3) == f"killed {pid}"

    assert time.monotonic() - began >= 0.3
    assert not running(pid)
    assert not (deployment / "server.pid").exists()


def test_a_reused_pid_is_not_touched(deployment: Path, processes: Processes) -> None:
    stranger = processes.spawn("sleep", "60")
    wait_until(lambda: start_time(stranger.pid) is not None)
    recorded = int(start_time(stranger.pid) or 0) + 1
    (deployment / "server.pid").write_text(f"{stranger.pid} {recorded}\n")

    assert state(deployment) == ServerState("stopped", stranger.pid)
    assert stop(deployment, timeout=0.3) == "none"

    assert stranger.poll() is None and running(stranger.pid)
    assert not (deployment / "server.pid").exists()


def test_a_zombie_counts_as_stopped(deployment: Path, processes: Processes) -> None:
    zombie = processes.spawn("true")
    wait_until(lambda: proc_state(zombie.pid) == "Z")
    (deployment / "server.pid").write_text(f"{zombie.pid} {start_time(zombie.pid)}\n")

    assert state(deployment) == ServerState("stopped", zombie.pid)
    assert stop(deployment) == "none"
    assert proc_state(zombie.pid) == "Z"  # nothing was signalled or waited for


def test_server_state_without_a_pid_file_is_none(tmp_path: Path) -> None:
    assert state(tmp_path) == ServerState("none")


# -- links, views and releases -------------------------------------------------------------------


def test_point_link_switches_atomically(tmp_path: Path) -> None:
    for release in ("a1", "b2"):
        (tmp_path / "releases" / release).mkdir(parents=True)
    link = tmp_path / "current"
    assert run(commands.point_link(str(link), "releases/a1")).returncode == 0
    seen: set[str] = set()
    gaps: list[OSError] = []
    switching = True

    def watch() -> None:
        while switching:
            try:
                seen.add(os.readlink(link))
            except OSError as exc:
                gaps.append(exc)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for release in ["b2", "a1"] * 10:
            assert run(commands.point_link(str(link), f"releases/{release}")).returncode == 0
    finally:
        switching = False
        watcher.join()

    assert gaps == []
    assert seen == {"releases/a1", "releases/b2"}
    assert tree(tmp_path) == {"releases", "releases/a1", "releases/b2", "current"}
    assert run(commands.read_link(str(link))).stdout == b"releases/a1\n"
    assert run(commands.read_link(str(tmp_path / "nope"))).stdout == b""


def test_drafter_view_links_every_weight_and_its_own_config(tmp_path: Path) -> None:
    weights = tmp_path / "models" / "Qwen3.6-27B-DFlash"
    weights.mkdir(parents=True)
    write_safetensors_stub(weights / "model.safetensors", {"fc.weight": ("BF16", [64, 64])})
    write_safetensors_stub(weights / "extra part.safetensors", {"x": ("F32", [4])})
    (weights / "config.json").write_text('{"guessed": true}')
    (weights / "README.md").write_text("readme")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in weights.iterdir()}
    release = tmp_path / "releases" / "abc"
    release.mkdir(parents=True)
    (release / "config.json").write_text('{"rendered": true}')
    view = release / "drafter"

    for _ in range(2):  # a second run changes nothing
        done = run(commands.make_drafter_view(str(weights), str(view)))
        assert done.returncode == 0, done.stderr

        assert sorted(p.name for p in view.iterdir()) == sorted(before)
        for name in before:
            expected = "../config.json" if name == "config.json" else str(weights / name)
            assert os.readlink(view / name) == expected
        assert json.loads((view / "config.json").read_text()) == {"rendered": True}
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in weights.iterdir()} == before


def test_list_releases_oldest_first_and_remove_by_exact_name(tmp_path: Path) -> None:
    releases = tmp_path / "releases"
    for release, mtime in (("b2", 3_000), ("a1", 2_000), ("c3", 1_000), ("x *", 4_000)):
        (releases / release).mkdir(parents=True)
        os.utime(releases / release, (mtime, mtime))
    (releases / "stray-file").write_text("")

    listed = run(commands.list_releases(str(releases)))

    assert listed.stdout.decode().splitlines() == ["1000 c3", "2000 a1", "3000 b2", "4000 x *"]
    assert run(commands.remove_releases(str(releases), ["*", "c3", "a1"])).returncode == 0
    assert sorted(p.name for p in releases.iterdir()) == ["b2", "stray-file", "x *"]
    assert run(commands.list_releases(str(tmp_path / "nope"))).stdout == b""


def test_status_report_parses_into_a_status_row(
    deployment: Path, processes: Processes, tmp_path: Path
) -> None:
    server = processes.spawn("sleep", "60")
    wait_until(lambda: start_time(server.pid) is not None)
    (deployment / "current").symlink_to("releases/0123456789ab")
    (deployment / "server.pid").write_text(f"{server.pid} {start_time(server.pid)}\n")
    (deployment / "lock").mkdir()
    (deployment / "lock" / "owner.json").write_text('{"run_id": "r1", "user": "ops"}')
    outcome = {
        "result": "deployed",
        "release": "0123456789ab",
        "gate": {"verdict": "pass", "mean_acceptance_length": 4.1},
    }
    lines = [
        audit_line("r0", "ops", "deploy", {"result": "failed"}),
        audit_line("r1", "ops", "deploy", outcome),
        audit_line("r2", "ops", "deploy", {"result": "unchanged", "release": "0123456789ab"}),
    ]
    (deployment / "audit.log").write_text("".join(f"{line}\n" for line in lines))

    done = run(commands.status_report(Layout(str(deployment))))

    assert parse_status_report(done.stdout.decode()) == {
        "release": "0123456789ab",
        "server": "running",
        "pid": server.pid,
        "last_result": "unchanged",
        "last_verdict": "pass",  # the last gate: an unchanged release ran none
        "last_mean_length": 4.1,
        "lock": '{"run_id": "r1", "user": "ops"}',
    }
    empty = run(commands.status_report(Layout(str(tmp_path / "never deployed"))))
    assert parse_status_report(empty.stdout.decode()) == {
        "release": None,
        "server": "none",
        "pid": None,
        "last_result": None,
        "last_verdict": None,
        "last_mean_length": None,
        "lock": None,
    }


# -- logs and disk -------------------------------------------------------------------------------


def test_watch_shows_the_server_and_only_the_log_written_since_its_start(
    deployment: Path, processes: Processes
) -> None:
    """A release started again (a rollback to it) appends to its own log; a deployment
    from before per-release logs keeps its one log file as server.log.old."""
    layout = Layout(str(deployment))
    log = deployment / "server.log"
    log.write_text("legacy\n")
    release_log = Path(layout.release_log("r1"))
    release_log.parent.mkdir(parents=True)
    release_log.write_text("".join(f"old {i}\n" for i in range(50)))
    (release_log.parent / "serve.sh").write_text("echo new 0; echo new 1; exec sleep 60\n")
    started = run(start_release(deployment, "r1"))
    assert started.returncode == 0, started.stderr
    pid, log_start = parse_started(started.stdout.decode())
    processes.track(pid)
    assert log_start == len("".join(f"old {i}\n" for i in range(50)))
    assert (deployment / "server.log.old").read_text() == "legacy\n"
    assert os.readlink(log) == "releases/r1/server.log"
    wait_until(lambda: release_log.read_text().endswith("new 1\n"))

    argv = commands.watch_server(layout.server_pid, layout.server_log, log_start, 40)
    frames = parse_frames(run(argv).stdout)
    assert parse_server_state(frames["server"].decode()) == ServerState("running", pid)
    assert frames["tail"] == b"new 0\nnew 1\n"
    one = parse_frames(
        run(commands.watch_server(layout.server_pid, layout.server_log, log_start, 1)).stdout
    )
    assert one["tail"] == b"new 1\n"
    missing = parse_frames(
        run(
            commands.watch_server(str(deployment / "nope.pid"), str(deployment / "nope.log"), 0, 5)
        ).stdout
    )
    assert missing == {"server": b"none\n", "tail": b""}


def test_target_facts_frame_gpus_disk_server_and_current(tmp_path: Path) -> None:
    fake_smi = tmp_path / "nvidia smi"
    fake_smi.write_text('#!/bin/sh\necho "$1"\nexit 3\n')
    fake_smi.chmod(0o755)
    deployment = tmp_path / "not yet" / "deployed"
    done = run(commands.target_facts(Layout(str(deployment)), str(fake_smi), "/nonexistent/vllm"))
    assert done.returncode == 0, done.stderr
    frames = parse_frames(done.stdout)

    assert frames["gpus"] == b"--query-gpu=index,uuid,memory.total,memory.used,memory.free\n"
    assert (frames["gpus.rc"], frames["apps.rc"]) == (b"3", b"3")
    fs = os.statvfs(tmp_path)
    assert abs(int(frames["disk"]) - fs.f_bavail * fs.f_frsize // 1024) <= 64 * 1024
    assert (frames["server"], frames["current"]) == (b"none\n", b"")

    deployment.mkdir(parents=True)
    (deployment / "server.pid").write_text("")  # a failed write leaves it empty
    (deployment / "current").symlink_to("releases/abc")
    argv = commands.target_facts(Layout(str(deployment)), "/nonexistent", "/nonexistent/vllm")
    frames = parse_frames(run(argv).stdout)
    assert frames["gpus.rc"] == b"127"
    assert (frames["server"], frames["current"]) == (b"none\n", b"releases/abc\n")


def version_frames(vllm: Path) -> tuple[str | None, str]:
    frames = parse_frames(
        run(commands.target_facts(Layout(str(vllm.parent)), "/nonexistent", str(vllm))).stdout
    )
    return parse_vllm_version(frames["version"].decode(), frames["version.rc"].decode())


def test_target_facts_read_the_vllm_version_or_its_package_metadata(tmp_path: Path) -> None:
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
