"""A transaction on a scripted container: the example playbook and plan, the container in
memory (its server running), and the TargetRun over them; the gates they run."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from examples import EXAMPLE, PLAYBOOK
from scripted import ScriptedContainer

from orchestrator.cancel import Cancel
from orchestrator.contract import jsonable
from orchestrator.deadline import SYSTEM_CLOCK, Clock
from orchestrator.drafters.kinds import get_kind
from orchestrator.gate import run_gate
from orchestrator.inventory import load_inventory
from orchestrator.plan import TargetPlan, plan_deploy
from orchestrator.playbook import Gate, Playbook, Probe, load_playbook
from orchestrator.probes.context import ContextBucket
from orchestrator.release import GateTarget
from orchestrator.transaction.deployment import Deployment, GateRunner
from orchestrator.transaction.options import Options
from orchestrator.transaction.target import TargetRun
from orchestrator.transport.base import Result

FAST_GATE = Gate(
    min_drafts=50,
    settle_seconds=0,  # the settle has tests of its own
    probe=Probe(scrape_interval=0.02, concurrency=1, max_tokens=8, endpoints=["completions"]),
)
BUCKETS = [ContextBucket("short", 0, None, ("hello",))]
CAUSES = get_kind("dflash").failure_causes


# -- the transaction -----------------------------------------------------------------------------


class Container(ScriptedContainer):
    """The deployment of `plan` in memory, its server running."""

    def __init__(self, plan: TargetPlan) -> None:
        super().__init__(plan.container, plan.layout)
        self.run_server()

    def gated_release(self, release_id: str, served_name: str, gate: Gate = FAST_GATE) -> None:
        """A release on the container whose manifest records its own gate settings."""
        target = GateTarget(served_name, 8000, gate)
        manifest = {
            "release_id": release_id,
            "run_id": "run-before",
            "files": {},
            "gate_target": jsonable(target),
        }
        self.release(release_id, {"manifest.json": json.dumps(manifest).encode()})


class DiskFillsAt:
    """The container's disk fills when the journal reaches `step`: from then on every
    write of a file fails as `ENOSPC` does (links and removals still work, as on a full
    filesystem: tests/faults/test_fault_matrix.py fills a real one)."""

    def __init__(self, container: ScriptedContainer, step: str) -> None:
        self.full = False
        write = container._write_file

        def write_file(path: str, data: bytes, mode: str, stdin: bytes) -> tuple[int, bytes]:
            if self.full:
                return 1, b"cat: write error: No space left on device"
            self.full = path == container.layout.journal and json.loads(stdin)["step"] == step
            return 0, write(path, data, mode, stdin)

        container.transport.on(
            "write_file", lambda argv, stdin: _answer_with(write_file, argv, stdin)
        )


def _answer_with(
    handler: Callable[..., tuple[int, bytes]], argv: Sequence[str], stdin: bytes | None
) -> Result:
    arguments = dict(argv.args)  # type: ignore[attr-defined]
    if stdin is not None:
        arguments["stdin"] = stdin
    code, data = handler(**arguments)
    return Result(tuple(argv), code, b"" if code else data, data if code else b"")


def setup(served_name: str = "new-name") -> tuple[Playbook, TargetPlan, Container]:
    playbook = load_playbook(
        PLAYBOOK,
        [
            f"target.served_name={served_name}",
            "gate.min_drafts=50",
            "gate.probe.scrape_interval=0.02",
            "gate.probe.concurrency=1",
            "gate.settle_seconds=0",
        ],
    )
    plan = plan_deploy(playbook, load_inventory(EXAMPLE))[0]
    return playbook, plan, Container(plan)


def target_run(
    playbook: Playbook,
    plan: TargetPlan,
    container: Container,
    cancel: Cancel | None = None,
    clock: Clock = SYSTEM_CLOCK,
    gate: GateRunner = run_gate,
) -> TargetRun:
    options = Options(run_id="run-now", user="ops")
    return TargetRun(
        Deployment(
            plan,
            container.transport,
            playbook,
            BUCKETS,
            "nvidia-smi",
            options,
            cancel=cancel or Cancel(),
            run_gate=gate,
            clock=clock,
        )
    )
