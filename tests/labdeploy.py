"""`orch deploy` on the lab, as the lab's deploy tests run it and read its document."""

from __future__ import annotations

from labtools import FAST, LabHandle


def deploy(lab: LabHandle, *args: str) -> tuple[int, dict]:
    result = lab.orch("deploy", "qwen-dflash", "-i", str(lab.inventory), "--json", *FAST, *args)
    assert result.stdout, result.stderr
    return result.code, result.json


def target(document: dict, name: str) -> dict:
    return next(t for t in document["targets"] if t["name"] == name)


def serving_pid(lab: LabHandle, name: str) -> int:
    pid_file = lab.deployment_dir(name) / "server.pid"
    return int(pid_file.read_text().split()[0])
