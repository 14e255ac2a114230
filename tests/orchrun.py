"""The one way tests run the real CLI: `python -m orchestrator` in its own process,
from the clone, as a user would, with the environment the test gives it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PLAIN = {"NO_COLOR": "1", "COLUMNS": "200", "PATH": "/usr/bin:/bin"}
"""A bare environment: no colour, wide, no inherited configuration."""
COMMAND = [sys.executable, "-m", "orchestrator"]


@dataclass
class RunResult:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    def __str__(self) -> str:
        """What a failed assertion shows: the exit code, each target that did not end
        deployed with its error and gate reason, and the end of stderr."""
        lines = [f"exit {self.code}"]
        try:
            targets = json.loads(self.stdout).get("targets") or []
        except (ValueError, AttributeError):
            targets = []
            lines.append(f"stdout: {self.stdout[-2000:]}")
        for target in targets:
            if isinstance(target, dict) and target.get("result") not in ("deployed", None):
                gate = target.get("gate") or {}
                lines.append(
                    f"{target.get('name')}: {target.get('result')}; error: {target.get('error')};"
                    f" gate: {gate.get('verdict')}: {gate.get('reason')}"
                )
        lines.append(f"stderr: {self.stderr[-3000:]}")
        return "\n".join(lines)


def orch(*args: str, env: Mapping[str, str] = PLAIN, timeout: float = 300) -> RunResult:
    done = subprocess.run(
        [*COMMAND, *args],
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=timeout,
        cwd=ROOT,
    )
    return RunResult(done.returncode, done.stdout, done.stderr)
