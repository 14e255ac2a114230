"""The transaction journal on the target: what a switch in progress is doing.

Written atomically (temp file, fsync, rename) beside the lock before the old
server is stopped, advanced at every step, removed at the end. A journal that
is still there when a run starts is the record of a run that never finished:
`status` shows it, `deploy` and `rollback` recover it before their own work.

    {"run_id": "...", "action": "deploy", "owner": "ops@ctl pid 4242",
     "from_release": "0d3c...", "to_release": "9a1f...", "step": "gate",
     "started": "2026-12-02T16:40:01+00:00", "updated": "2026-12-02T16:40:09+00:00"}

`step` is the step being done; `gate passed` means `to_release` passed its gate
and is kept, every other step means it was never gated and must be undone.

Every write is checked whole on the container before it replaces the last one,
so a run cut mid-write leaves the previous step's journal. A journal that still
cannot be read (cut by an older orch, edited by hand) is `Unreadable`: never a
dead end, the recovering run infers the transaction from the container itself.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from orchestrator import remotejson
from orchestrator.container.shell import (
    FRAME_FUNCTIONS,
    builder,
    parse_frames,
    q,
    read_whole,
    remove_file,
    run_step,
    script,
    write_file,
)
from orchestrator.deadline import now
from orchestrator.layout import Layout
from orchestrator.transport.base import Transport

GATE_PASSED = "gate passed"
UNKNOWN_RUN = "unknown"
"""The run id of a transaction inferred from a container whose journal could not be read."""


@dataclass(frozen=True)
class Transaction:
    run_id: str
    action: str
    owner: str
    from_release: str | None
    to_release: str
    step: str
    started: str
    updated: str
    replaced: dict[str, str] | None = None
    """With `deploy --replace`: the other playbook's deployment whose server this run
    stopped (`playbook`, `file`, `release`), restored unless `to_release` passed."""
    stopped_on: str | None = None
    """With `from_release` None: the release `current` names again when the switch is
    undone, its server left stopped (a --replace over this deployment's stopped server:
    the release it was on stays its own)."""

    @property
    def gated(self) -> bool:
        return self.step == GATE_PASSED

    def describe(self) -> str:
        source = self.from_release or (
            f"{self.stopped_on} (stopped)" if self.stopped_on else "nothing"
        )
        replacing = f" replacing {self.replaced['playbook']}" if self.replaced else ""
        return (
            f"run {self.run_id} ({self.action} {source} -> {self.to_release}{replacing} by "
            f"{self.owner}) stopped at '{self.step}' ({self.updated})"
        )


@dataclass(frozen=True)
class Unreadable:
    """A journal file that is there but is not a transaction orch wrote."""

    path: str
    problem: str

    def describe(self) -> str:
        return f"{self.path} is unreadable ({self.problem}): a run stopped in its switch"


@builder
def read_journals(state_dir: str) -> list[str]:
    """Every deployment's journal under the state dir, as frames `PATH LENGTH\\n` + bytes."""
    return script(
        FRAME_FUNCTIONS + f"for p in {q(state_dir)}/*/journal.json; do "
        'if [ -f "$p" ]; then frame "$p" "$p"; fi; done'
    )


def parse(raw: bytes, path: str) -> Transaction | Unreadable:
    """A journal file's bytes: the transaction orch wrote, or what is wrong with them."""
    try:
        data = remotejson.loads(raw)
        return Transaction(
            **{
                f.name: data[f.name] if f.default is dataclasses.MISSING else data.get(f.name)
                for f in dataclasses.fields(Transaction)
            }
        )
    except (ValueError, TypeError, KeyError) as exc:
        problem = "empty" if not raw else f"{len(raw)} bytes, {type(exc).__name__}: {exc}"
        return Unreadable(path, problem)


def replacing(transport: Transport, layout: Layout) -> dict[str, Transaction]:
    """The interrupted `deploy --replace` runs of the other deployments on this container
    that stopped this one's server, by the name of the deployment that replaced it."""
    found = parse_frames(run_step(transport, read_journals(layout.state_dir), "journals").stdout)
    return {
        Layout(path.rsplit("/", 1)[0]).name: journal
        for path, raw in found.items()
        if path != layout.journal
        and isinstance(journal := parse(raw, path), Transaction)
        and journal.replaced
        and journal.replaced.get("playbook") == layout.name
    }


class Journal:
    """The journal file of one deployment; `active` is the transaction this run writes."""

    def __init__(self, transport: Transport, layout: Layout) -> None:
        self.transport, self.layout = transport, layout
        self.active: Transaction | None = None

    def read(self) -> Transaction | Unreadable | None:
        raw = read_whole(self.transport, [self.layout.journal], "journal").get(self.layout.journal)
        return None if raw is None else parse(raw, self.layout.journal)

    def begin(
        self,
        run_id: str,
        action: str,
        owner: str,
        from_release: str | None,
        to_release: str,
        replaced: dict[str, str] | None = None,
        stopped_on: str | None = None,
    ) -> None:
        stamp = now()
        self._write(
            Transaction(
                run_id,
                action,
                owner,
                from_release,
                to_release,
                "begin",
                stamp,
                stamp,
                replaced,
                stopped_on,
            )
        )

    def advance(self, step: str) -> None:
        if self.active:
            self._write(dataclasses.replace(self.active, step=step, updated=now()))

    def clear(self) -> None:
        run_step(self.transport, remove_file(self.layout.journal), "clear the journal")
        self.active = None

    def _write(self, transaction: Transaction) -> None:
        data = json.dumps(dataclasses.asdict(transaction), sort_keys=True).encode()
        run_step(self.transport, write_file(self.layout.journal, data), "journal", stdin=data)
        self.active = transaction
