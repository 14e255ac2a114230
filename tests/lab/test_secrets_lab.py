"""An authenticated server on the lab: the API key from `server.secrets`, in one 0600
file per release and nowhere else, the gate's probes authenticated, the stand-in
refusing what vLLM refuses, and a rotation that retires the old key."""

from __future__ import annotations

import json
import secrets
import stat
from pathlib import Path

import pytest
from labtools import FAST, LabHandle, post_completion

pytestmark = pytest.mark.lab

SECRET_SET = ["--set", 'server.secrets={"VLLM_API_KEY": {"env": "K"}}']


def deploy(lab: LabHandle, *args: str) -> tuple[int, dict]:
    result = lab.orch(
        "deploy", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct200", "--json", *args
    )
    assert result.stdout, f"exit {result.code}, no document; stderr:\n{result.stderr[-4000:]}"
    return result.code, json.loads(result.stdout)


def files_holding(root: Path, value: str) -> list[Path]:
    """Every regular file under `root` holding `value`, but the models' sparse weights
    (gigabytes of holes; orch never writes there)."""
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.suffix != ".safetensors":
            try:
                if value.encode() in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def server_pid(lab: LabHandle) -> int:
    return int((lab.deployment_dir("ct200") / "server.pid").read_text().split()[0])


def post(address: str, port: int, key: str | None) -> int:
    status, body = post_completion(address, port, "qwen3.6-27b", key, timeout=30)
    assert status != 401 or body == b'{"error":"Unauthorized"}'
    return status


def listening(pid: int) -> tuple[str, int]:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    words = [w.decode() for w in argv]
    return words[words.index("--host") + 1], int(words[words.index("--port") + 1])


def test_a_secret_api_key_reaches_only_its_0600_file_and_rotates(
    lab: LabHandle, tmp_path: Path
) -> None:
    first = secrets.token_urlsafe(24)
    lab.env["K"] = first
    code, document = deploy(lab, *FAST, *SECRET_SET)
    assert code == 0, document
    [entry] = document["targets"]
    assert entry["result"] == "deployed"
    assert entry["gate"]["verdict"] == "pass"  # through authenticated probes
    assert entry["gate"]["request_errors"] == 0

    deployment = lab.deployment_dir("ct200")
    release_dir = deployment / "releases" / entry["release"]
    [holder] = files_holding(lab.lab.root, first)
    assert holder == release_dir / "secrets.env"
    mode = holder.stat()
    assert stat.S_IMODE(mode.st_mode) == 0o600
    pid = server_pid(lab)
    assert mode.st_uid == Path(f"/proc/{pid}").stat().st_uid  # the server's own user
    assert first.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert first.encode() in Path(f"/proc/{pid}/environ").read_bytes()  # read by serve.sh

    manifest = json.loads((release_dir / "manifest.json").read_text())
    assert set(manifest["secrets"]) == {"VLLM_API_KEY"}
    assert first not in json.dumps(manifest)

    address, port = listening(pid)
    assert post(address, port, None) == 401
    assert post(address, port, "wrong") == 401
    assert post(address, port, first) == 200

    inventory = str(lab.inventory)
    one = ["-i", inventory, "--limit", "ct200"]
    outputs = [
        lab.orch("render", "qwen-dflash", *one, *SECRET_SET),
        lab.orch("render", "qwen-dflash", *one, *SECRET_SET, "--json"),
        lab.orch("status", "qwen-dflash", *one),
        lab.orch("status", "qwen-dflash", *one, "--json"),
        lab.orch("history"),
        lab.orch("history", "--json"),
        lab.orch("history", "--show", document["run_id"]),
        lab.orch("logs", "qwen-dflash", *one, "-n", "500"),
        lab.orch("logs", "qwen-dflash", *one, "--json"),
        lab.orch("verify-config", "qwen-dflash", *one, *SECRET_SET, "--json"),
    ]
    for result in outputs:
        assert first not in result.stdout + result.stderr
    assert "VLLM_API_KEY" in outputs[0].stdout  # serve.sh names it, and reads its file

    # A rotation: a new release, restarted and gated; the old key no longer works.
    second = secrets.token_urlsafe(24)
    lab.env["K"] = second
    verify = lab.orch("verify-config", "qwen-dflash", *one, *SECRET_SET, "--json")
    [checked] = verify.json["targets"]
    assert checked["changed_on_target"] == []
    assert any("secret VLLM_API_KEY" in line for line in checked["playbook_differs"])
    assert second not in verify.stdout

    code, rotated = deploy(lab, *FAST, *SECRET_SET, "--diff")
    assert code == 0, rotated
    [entry2] = rotated["targets"]
    assert entry2["result"] == "deployed"
    assert entry2["release"] != entry["release"]
    assert "<secret VLLM_API_KEY changed>" in entry2["diff"]
    new_pid = server_pid(lab)
    assert new_pid != pid
    address, port = listening(new_pid)
    assert post(address, port, first) == 401
    assert post(address, port, second) == 200
    for value in (first, second):
        holders = files_holding(lab.lab.root, value)
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in holders)
        assert [p.name for p in holders] == ["secrets.env"]
        assert files_holding(Path(lab.env["ORCH_STATE_DIR"]), value) == []
    assert second not in json.dumps(rotated)


def test_a_missing_secret_is_refused_naming_it_and_its_source(lab: LabHandle) -> None:
    lab.env.pop("K", None)
    result = lab.orch(
        "deploy", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct200", *SECRET_SET
    )
    assert result.code == 2
    assert "server.secrets.VLLM_API_KEY: environment variable K is not set" in result.stderr


def test_a_key_given_in_the_open_is_a_preflight_warning_and_still_probed(
    lab: LabHandle,
) -> None:
    """server.env and --api-key work (the probes send the key vLLM would check) and each
    is a warning naming the server.secrets form."""
    key = secrets.token_urlsafe(16)
    code, document = deploy(lab, *FAST, "--set", f"server.env.VLLM_API_KEY={key}")
    assert code == 0, document
    [entry] = document["targets"]
    [warning] = [f for f in entry["findings"] if f["field"] == "server.env.VLLM_API_KEY"]
    assert warning["severity"] == "warning"
    assert "server.secrets.VLLM_API_KEY" in warning["message"]
    assert entry["gate"]["verdict"] == "pass"

    flag = ["--set", "server.extra_args=[--api-key, another-key]"]
    code, document = deploy(lab, *FAST, *flag)
    assert code == 0, document
    [entry] = document["targets"]
    assert entry["gate"]["verdict"] == "pass"  # --api-key takes precedence, as in vLLM
    [warning] = [f for f in entry["findings"] if f["field"] == "server.extra_args"]
    assert "command line" in warning["message"]
    assert post(*listening(server_pid(lab)), key) == 401
    assert post(*listening(server_pid(lab)), "another-key") == 200
