"""`orch baseline`: on each container, in the rollout's order, the same target served
without speculation, measured at the playbook's speed levels and recorded, then the
gated release served and gated again (transaction/baseline.py), on the run skeleton."""

from __future__ import annotations

from functools import partial

from orchestrator.cancel import Cancel
from orchestrator.connections import Connect, Pool
from orchestrator.documents.runs import BaselineRun
from orchestrator.fleet.inputs import Inputs
from orchestrator.fleet.runs import deployment_of, rolled_out
from orchestrator.fleet.skeleton import Acted, run
from orchestrator.probes import load_prompts
from orchestrator.progress import Progress
from orchestrator.transaction.baseline import ContainerBaseline
from orchestrator.transaction.options import Options
from orchestrator.transaction.outcome import Outcome


def baseline(
    inputs: Inputs, options: Options, connect: Connect, progress: Progress, cancel: Cancel
) -> tuple[BaselineRun, int]:
    prompts = load_prompts(inputs.playbook.gate.probe.prompts)
    plans = {p.container: p for p in inputs.plans}

    def act(connections: Pool, progress: Progress) -> Acted[BaselineRun]:
        def one(name: str) -> Outcome:
            d = deployment_of(inputs, connections, plans[name], options, progress, prompts, cancel)
            return ContainerBaseline(d).run()

        rollout = rolled_out(inputs, plans, cancel, one)
        return Acted(rollout.outcomes, partial(BaselineRun, rollout=rollout))

    return run("baseline", inputs, options, connect, progress, cancel, act)
