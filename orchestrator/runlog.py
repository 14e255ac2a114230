"""The local log of one deploy or rollback run: `<state dir>/runs/<run id>.log`.

It keeps what the run showed (each container's steps, with times) and every
remote command it ran: the argv, the container, the exit status or the error,
and stdout/stderr, each cut to a bounded size. Every line carries the run id,
so lines grepped out of many logs still say which run they belong to.

Containers run in parallel: one lock keeps each record's lines together. What
came from a target is untrusted and is written as text only: decoded with
replacement and with control characters shown as escapes, so printing a log
can never drive a terminal. The log is a record, not the change: a failure to
write it disables it with one warning and never stops the run.
"""

from __future__ import annotations

import os
import re
import shlex
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.errors import InputError, NeedsAttention
from orchestrator.progress import Progress
from orchestrator.secrets import mask
from orchestrator.settings import state_dir

RUNS_DIR = "runs"
SUFFIX = ".log"
FIELD_LIMIT = 4096
"""Bytes kept of each command's argv, stdout and stderr: the first and last halves."""
KEPT = 500
"""Run logs kept on the control machine; a new run removes the oldest beyond it."""
RUN_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]*")
NO_CONTAINER = "-"

# C0 and C1 control characters but tab, shown as Python escapes (newlines split lines).
_CONTROLS = {
    code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)] if chr(code) != "\t"
}


def runs_dir() -> Path:
    return state_dir() / RUNS_DIR


def log_path(run_id: str) -> Path:
    return runs_dir() / f"{run_id}{SUFFIX}"


def bounded(data: bytes, limit: int = FIELD_LIMIT) -> str:
    """`data` as text, its middle left out (and said so) past `limit` bytes."""
    if len(data) > limit:
        half = limit // 2
        left_out = len(data) - 2 * half
        data = data[:half] + f"\n[... {left_out} bytes left out ...]\n".encode() + data[-half:]
    return data.decode("utf-8", "replace")


def _escaped(text: str) -> str:
    return text.translate(_CONTROLS)


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RunLog:
    """Append-only and thread-safe; each record is appended on its own (open, write,
    close), so a run killed at any point leaves every record written before it."""

    def __init__(self, run_id: str, path: Path | None = None) -> None:
        self.run_id = run_id
        self.path = path or log_path(run_id)
        self.warning: str | None = None
        self._lock = threading.Lock()
        self._last_step: dict[str, str] = {}

    def _append(self, text: str) -> None:
        """Under the lock. The first failure becomes the run's one warning and ends the log.
        Secret values are masked (`secrets.mask`)."""
        if self.warning is not None:
            return
        text = mask(text)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with open(descriptor, "a", encoding="utf-8", errors="backslashreplace") as file:
                file.write(text)
        except (OSError, ValueError) as exc:
            self.warning = f"could not write the run log {self.path}: {exc}"

    def write(self, container: str, fields: Sequence[tuple[str, str]]) -> None:
        """One record: each (label, text) field, every line of it prefixed with the
        time, the run id, the container and the label."""
        head = f"{_stamp()} {self.run_id} {_escaped(container) or NO_CONTAINER}"
        lines = [
            f"{head} {label}: {_escaped(line)}\n"
            for label, text in fields
            for line in (text.splitlines() or [""])
        ]
        with self._lock:
            self._append("".join(lines))

    def note(self, container: str, text: str) -> None:
        self.write(container, [("note", text)])

    def step(self, container: str, text: str) -> None:
        """A progress step; repeats of the same step ("wait ready (12 s left)") once."""
        kind = text.split(" (")[0]
        with self._lock:
            repeated = self._last_step.get(container) == kind
            self._last_step[container] = kind
        if not repeated:
            self.write(container, [("step", text)])

    def recording(self, forward: Progress) -> Progress:
        """A progress callback that records each step here, then passes it on (with what
        a wait saw, which the run's server log has in full)."""

        def both(name: str, step: str, detail: str = "") -> None:
            self.step(name, step)
            forward(name, step, detail)

        return both

    def command(
        self,
        container: str,
        argv: Sequence[str],
        stdin: bytes | None,
        seconds: float,
        outcome: tuple[int, bytes, bytes] | BaseException,
        hidden: bool = False,
    ) -> None:
        """One remote command: what ran and what came back (exit status and output,
        or the error that ended it); a `hidden` command's output only by its size
        (it holds secrets: `secrets.no_log`)."""
        fields = [("run", bounded(shlex.join(argv).encode()))]
        sent = f", {len(stdin)} bytes on stdin" if stdin else ""
        if isinstance(outcome, BaseException):
            fields.append(("error", f"after {seconds:.2f} s{sent}: {outcome}"))
        else:
            exit_code, stdout, stderr = outcome
            fields.append(("exit", f"{exit_code} after {seconds:.2f} s{sent}"))
            fields += [
                (name, f"{len(data)} bytes, not recorded (secrets)" if hidden else bounded(data))
                for name, data in (("stdout", stdout), ("stderr", stderr))
                if data
            ]
        self.write(container, fields)


def prune(keep: int = KEPT) -> None:
    """Remove all but the newest `keep` run logs (run ids sort by their start time).
    Housekeeping only: what cannot be removed now is tried again by the next run."""
    directory = runs_dir()
    try:
        logs = sorted(directory.glob(f"*{SUFFIX}"))
        for old in logs[: max(0, len(logs) - keep)]:
            old.unlink(missing_ok=True)
    except OSError:
        return


@dataclass(frozen=True)
class Recorded:
    run_id: str
    path: Path
    lines: list[str]


def read(run_id: str) -> Recorded:
    """The log of the run `run_id` names (see `find`), line by line."""
    path = find(run_id)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise NeedsAttention(f"cannot read the run log {path}: {exc.strerror or exc}") from None
    return Recorded(path.name[: -len(SUFFIX)], path, text.splitlines())


STEP_LABELS = ("step", "note")
"""The labels of a run's own story (its steps, what it said), apart from the commands."""


def steps_only(lines: Sequence[str]) -> list[str]:
    """The lines of a run log that are steps and notes: each container's path through
    the run and its result, without every remote command and its output."""
    return [
        line
        for line in lines
        if line.split(" ", 4)[3:4] in ([f"{label}:"] for label in STEP_LABELS)
    ]


def find(run_id: str) -> Path:
    """The log of the run with this id, or of the one run whose id starts with it."""
    if not RUN_ID.fullmatch(run_id):
        raise InputError(f"{run_id!r} is not a run id (letters, digits, '-' and '_')")
    directory = runs_dir()
    exact = directory / f"{run_id}{SUFFIX}"
    if exact.is_file():
        return exact
    names = sorted(p.name for p in directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []
    matches = [n[: -len(SUFFIX)] for n in names if n.startswith(run_id)]
    if not matches:
        raise InputError(f"no run log for {run_id!r} in {directory}")
    if len(matches) > 1:
        shown = ", ".join(matches[:10]) + (", ..." if len(matches) > 10 else "")
        raise InputError(f"{run_id!r} is ambiguous: {len(matches)} runs match ({shown})")
    return directory / f"{matches[0]}{SUFFIX}"
