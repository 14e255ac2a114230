"""The servers the conformance tests compare: the real vLLM 0.32.0 for CPUs (the
session's `real_lab`) and the lab's stand-in claiming 0.32.0 (conftest.py's `standin_lab`), each
launched by its lab container's own `vllm` on a port of its own, with the tiny models
the lab made; and the shape of what they answer."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.lab.cluster import Lab
from orchestrator.lab.paths import ContainerPaths

VERSION = "0.32.0"
K = 3
PORT = 8100
READY_TIMEOUT = 600.0
FAILURE_TIMEOUT = 600.0
PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"


@dataclass
class Kind:
    """One kind of server, launched by a lab container's own `vllm`."""

    name: str
    container: ContainerPaths
    address: str
    models: Path

    def launch(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> Server:
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(self.container.vllm), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=self.container.rootfs,
                start_new_session=True,
            )
        return Server(process, log)

    def serve_args(self, speculative: dict, port: int = PORT) -> list[str]:
        return [
            "serve",
            str(self.models / "tiny-target"),
            "--served-model-name",
            "tiny",
            "--host",
            self.address,
            "--port",
            str(port),
            "--max-model-len",
            "2048",
            "--speculative-config",
            json.dumps(speculative),
        ]

    def self_draft(self) -> dict:
        return {
            "method": "draft_model",
            "model": str(self.models / "tiny-target"),
            "num_speculative_tokens": K,
        }


@dataclass
class Server:
    process: subprocess.Popen
    log: Path

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after a grace: only what it started."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def outcome(self, address: str, port: int, timeout: float) -> tuple[int | str, str]:
        """Its exit code once it has exited by itself, or "served" when /health answered
        200 instead (stopped then); and its output."""
        deadline = time.monotonic() + timeout
        try:
            while (code := self.process.poll()) is None:
                if health(address, port) == 200:
                    return "served", self.log.read_text(errors="replace")
                if time.monotonic() > deadline:
                    pytest.fail(f"{self.log.name}: neither failed nor served in {timeout:.0f} s")
                time.sleep(0.5)
        finally:
            self.stop()
        return code, self.log.read_text(errors="replace")


def health(address: str, port: int) -> int | str:
    """/health's status code, or "refused" when nothing listens."""
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/health", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (ConnectionRefusedError, ConnectionResetError):
        return "refused"
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (ConnectionRefusedError, ConnectionResetError)):
            return "refused"
        return f"no answer ({exc.reason})"
    except TimeoutError:
        return "no answer (timeout)"


def states_until(
    address: str,
    port: int,
    done: Callable[[int | str], bool],
    process: subprocess.Popen,
    timeout: float,
) -> list[int | str]:
    """The distinct /health states in the order seen, until `done` or the process exits."""
    seen: list[int | str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = health(address, port)
        if not seen or seen[-1] != state:
            seen.append(state)
        if done(state) or process.poll() is not None:
            return seen
        time.sleep(0.1)
    pytest.fail(f"no end in {timeout:.0f} s: /health went {seen}")


def shape(value: object) -> object:
    """A JSON value's structure: keys and value types, lists by their first item."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def kind_of(name: str, lab: Lab) -> Kind:
    (container,) = lab.containers()
    paths = ContainerPaths(Path(container.root))
    return Kind(name, paths, container.address, paths.rootfs / "opt" / "models")
