"""The decision on a paused gate, on the container.

A deploy whose gate ended inconclusive under `gate.on_inconclusive: pause` keeps its
lock, writes `paused` as its journal's step and waits. `orch promote|abort|retry`
writes the decision beside the lock, only while the lock is still that run's:

    {"run_id": "...", "choice": "promote", "by": "ops@ctl", "at": "2026-12-02T16:40:01+00:00"}

The paused run reads it at each poll, acts on a decision that names its own run (one
naming another run is stale, and ignored) and removes it. The journal step `paused`
is not `gate passed`: a run killed while paused is undone by the next run, as one
killed in its gate is.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from typing import Literal, get_args

from orchestrator import remotejson
from orchestrator.container.shell import (
    builder,
    q,
    read_whole,
    remove_file,
    run_step,
    script,
    write_parts,
)
from orchestrator.errors import InputError, NeedsAttention
from orchestrator.layout import Layout
from orchestrator.transport.base import Transport

PAUSED = "paused"
"""The journal's step while a gate waits for a decision."""

Choice = Literal["promote", "abort", "retry"]
CHOICES: tuple[Choice, ...] = get_args(Choice)


@dataclass(frozen=True)
class Decision:
    """What a person decided for a paused run: who, when, and which run it is for."""

    run_id: str
    choice: Choice
    by: str
    at: str

    def describe(self) -> str:
        return f"{self.choice} by {self.by} at {self.at}"


def parse(raw: bytes, path: str) -> Decision | str:
    """A decision file's bytes: the decision, or what is wrong with them (said by the
    paused run, which then goes on waiting)."""
    try:
        data = remotejson.loads(raw)
        decision = Decision(str(data["run_id"]), data["choice"], str(data["by"]), str(data["at"]))
    except (ValueError, TypeError, KeyError) as exc:
        return f"{path}: not a decision ({type(exc).__name__}: {exc})"
    if decision.choice not in CHOICES:
        return f"{path}: choice {decision.choice!r} is none of {', '.join(CHOICES)}"
    return decision


@builder
def write_decision(
    decision_path: str, owner_path: str, journal_path: str, run_id: str, data: bytes
) -> list[str]:
    """The decision written (stdin, atomically) only while `run_id` still holds the
    lock and its journal is at `paused`: exit 3 when not (the run ended or went on, or
    the lock was broken)."""
    step = json.dumps({"step": PAUSED})[1:-1]  # as the journal's JSON writes it
    return script(
        f"grep -qF {q(run_id)} {q(owner_path)} 2>/dev/null "
        f"&& grep -qF {q(run_id)} {q(journal_path)} 2>/dev/null "
        f"&& grep -qF {q(step)} {q(journal_path)} || exit 3\n",
        *write_parts(decision_path, data),
    )


def write(transport: Transport, layout: Layout, decision: Decision) -> None:
    """The decision beside the lock, for the paused run `decision.run_id`; InputError
    (nothing written) when that run no longer holds the lock or is no longer paused."""
    data = json.dumps(dataclasses.asdict(decision), sort_keys=True).encode()
    argv = write_decision(layout.decision, layout.lock_owner, layout.journal, decision.run_id, data)
    result = transport.run(argv, stdin=data, timeout=60.0)
    if result.exit_code == 3:
        raise InputError(
            f"run {decision.run_id} is no longer paused here: nothing decided",
            subject=transport.label,
        )
    if result.exit_code != 0:
        raise NeedsAttention(
            f"the decision could not be written to {layout.decision}: {result.error_text}",
            subject=transport.label,
        )


def read(transport: Transport, layout: Layout) -> Decision | str | None:
    """The decision waiting beside the lock (None: none yet)."""
    raw = read_whole(transport, [layout.decision], "read the decision").get(layout.decision)
    return None if raw is None else parse(raw, layout.decision)


def clear(transport: Transport, layout: Layout) -> None:
    run_step(transport, remove_file(layout.decision), "clear the decision")


def commands(playbook: str, inventory: str, container: str) -> dict[Choice, str]:
    """The commands that decide for a paused run on `container`, as printed: they run so."""
    return {
        choice: shlex.join(["orch", choice, playbook, "-i", inventory, "--limit", container])
        for choice in CHOICES
    }
