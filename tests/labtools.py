"""Helpers for tests against a real lab: free networks, the CLI as a process."""

from __future__ import annotations

import itertools
import json
import random
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from orchestrator.lab.cluster import SSH_PORT, Lab

ROOT = Path(__file__).resolve().parent.parent
_networks = itertools.count(random.randrange(100, 200))


def free_network() -> str:
    """A loopback /16 whose first host address is free for the lab's sshd."""
    for second in _networks:
        network = f"127.{second % 250 + 1}"
        with socket.socket() as probe:
            try:
                probe.bind((f"{network}.1.1", SSH_PORT))
                return network
            except OSError:
                continue
    raise RuntimeError("no free loopback network")


@dataclass
class RunResult:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict:
        return json.loads(self.stdout)


@dataclass
class LabHandle:
    lab: Lab
    env: dict[str, str]

    @property
    def inventory(self) -> Path:
        return self.lab.inventory

    def orch(self, *args: str, timeout: float = 300) -> RunResult:
        """Run the real CLI in its own process, as a user would."""
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            cwd=ROOT,
        )
        return RunResult(done.returncode, done.stdout, done.stderr)

    def container_vars(self, name: str) -> dict:
        return yaml.safe_load(self.inventory.read_text())["containers"][name]["vars"]

    def deployment_dir(self, name: str, playbook: str = "qwen-dflash") -> Path:
        return Path(self.container_vars(name)["state_dir"]) / playbook
