"""The bodies of the runs that change containers: deploy (and its dry run, `orch
diff`), rollback and the server actions, each its per-container work on the run
skeleton (fleet/skeleton.py), in the rollout's order."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from orchestrator.cancel import Cancel
from orchestrator.connections import Connect, Pool
from orchestrator.container.gpu import DEFAULT_NVIDIA_SMI
from orchestrator.contract import Action, run_result
from orchestrator.deadline import SYSTEM_CLOCK, Clock
from orchestrator.documents.runs import (
    DeployRun,
    RollbackRun,
    ServerRun,
)
from orchestrator.errors import OrchError
from orchestrator.fanout import fan_out
from orchestrator.fleet.inputs import Inputs, load
from orchestrator.fleet.read import read_each
from orchestrator.fleet.releases import read_record
from orchestrator.fleet.skeleton import Acted, run
from orchestrator.plan import TargetPlan
from orchestrator.probes import load_passages, load_prompts
from orchestrator.probes.context import context_buckets
from orchestrator.progress import Progress
from orchestrator.rollout import RolloutPlan, RolloutRun, run_rollout
from orchestrator.runs import resolve
from orchestrator.transaction.actions import ServerActionRun
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.options import Options
from orchestrator.transaction.outcome import Outcome
from orchestrator.transaction.target import ShowDiff, TargetRun


def deployment_of(
    inputs: Inputs,
    connections: Pool,
    plan: TargetPlan,
    options: Options,
    progress: Progress,
    prompts: list[str],
    cancel: Cancel,
    clock: Clock = SYSTEM_CLOCK,
) -> Deployment:
    """The container's Deployment for this run: its connection, buckets, nvidia-smi, and
    the other playbooks' deployments beside it."""
    nvidia_smi = inputs.inventory.container_vars(plan.container).get(
        "nvidia_smi", DEFAULT_NVIDIA_SMI
    )
    buckets = context_buckets(
        prompts,
        load_passages(),
        plan.drafter_config or {},
        inputs.playbook.server.max_model_len,
        inputs.playbook.gate.probe.max_tokens,
    )

    def neighbour(playbook: str) -> Deployment | None:
        """Another playbook's deployment on this container (deploy --replace, its recovery)."""
        try:
            other = load(playbook, inputs.inventory_path, [plan.container], [])
        except OrchError:
            return None
        if not other.plans or other.playbook.name == inputs.playbook.name:
            return None
        return deployment_of(
            other,
            connections,
            other.plans[0],
            options,
            progress,
            load_prompts(other.playbook.gate.probe.prompts),
            cancel,
            clock,
        )

    return Deployment(
        plan,
        connections.container(plan.container),
        inputs.playbook,
        buckets,
        nvidia_smi,
        options,
        progress,
        cancel,
        neighbour,
        clock=clock,
    )


def _unreached(plan: TargetPlan, exc: OrchError) -> Outcome:
    """A target that cannot even be reached is that target's outcome, not the run's end."""
    return Outcome(
        plan.container,
        plan.host,
        release=plan.release_id,
        error=exc.message_for(plan.container),
        exit_code=exc.exit_code,
    )


def deploy(
    inputs: Inputs,
    options: Options,
    connect: Connect,
    progress: Progress,
    cancel: Cancel,
    show_diff: ShowDiff = lambda *_: None,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[DeployRun, int]:
    """With `options.diff`, `show_diff` gets each container's diff before its switch;
    `clock` times the gates' waits."""
    prompts = load_prompts(inputs.playbook.gate.probe.prompts)
    plans = {p.container: p for p in inputs.plans}

    def act(connections: Pool, progress: Progress) -> Acted[DeployRun]:
        def one(name: str) -> Outcome:
            deployment = deployment_of(
                inputs, connections, plans[name], options, progress, prompts, cancel, clock
            )
            return TargetRun(deployment, show_diff).deploy()

        rollout = rolled_out(inputs, plans, cancel, one)
        usage = connections.usage()
        return Acted(rollout.outcomes, partial(DeployRun, rollout=rollout, connections=usage))

    return run("deploy", inputs, options, connect, progress, cancel, act)


def as_diff(document: DeployRun, dry_run_code: int) -> tuple[DeployRun, int]:
    """`orch diff`'s document and exit status, as `kubectl diff`'s: 0 nothing would
    change, 1 something would, 2 or more an error; a dry run's 1 (preflight found an
    error) is an error here. The document's `result` is the same fact as the status."""
    if dry_run_code == 1:
        code = 2
    elif dry_run_code:
        code = dry_run_code
    else:
        code = 1 if any(target.diff for target in document.targets) else 0
    return document.model_copy(update={"result": run_result(code)}), code


def server_action(
    inputs: Inputs,
    options: Options,
    action: Action,
    connect: Connect,
    progress: Progress,
    cancel: Cancel,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[ServerRun, int]:
    """`orch stop|start|restart|remove` on every selected container, in the rollout's
    order (canaries first, then waves, within its failure budget): a rolling restart."""
    prompts = load_prompts(inputs.playbook.gate.probe.prompts)
    plans = {p.container: p for p in inputs.plans}

    def act(connections: Pool, progress: Progress) -> Acted[ServerRun]:
        def one(name: str) -> Outcome:
            deployment = deployment_of(
                inputs, connections, plans[name], options, progress, prompts, cancel, clock
            )
            return ServerActionRun(deployment).act(action)

        rollout = rolled_out(inputs, plans, cancel, one)
        return Acted(rollout.outcomes, partial(ServerRun, action=action, rollout=rollout))

    return run(action, inputs, options, connect, progress, cancel, act)


def rolled_out(
    inputs: Inputs, plans: dict[str, TargetPlan], cancel: Cancel, one: Callable[[str], Outcome]
) -> RolloutRun:
    """`one` on each container in the rollout's order; after an interrupt, or once the
    failure budget is spent, the rest are skipped."""

    def not_started(name: str) -> Outcome:
        why = (
            "the run was interrupted"
            if cancel.requested
            else "the rollout's failure budget was spent"
        )
        plan = plans[name]
        return Outcome(
            plan.container, plan.host, result="skipped", exit_code=0, error=f"not started: {why}"
        )

    return run_rollout(
        list(plans),
        inputs.playbook.rollout,
        lambda name: not_started(name) if cancel.requested else one(name),
        not_started,
        lambda name, exc: _unreached(plans[name], exc),
    )


def rollback(
    inputs: Inputs,
    options: Options,
    to: str | None,
    connect: Connect,
    progress: Progress,
    cancel: Cancel,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[RollbackRun, int]:
    """Each container back to its previous release, or with `to` (a run id, a release
    id, or a unique prefix) to what that run left it on. `to` is resolved from every
    container's records before anything is switched: an unknown or ambiguous id is
    an InputError with nothing touched."""
    prompts = load_prompts(inputs.playbook.gate.probe.prompts)
    plans = {p.container: p for p in inputs.plans}

    def act(connections: Pool, progress: Progress) -> Acted[RollbackRun]:
        unread: dict[str, OrchError] = {}
        resolution = None
        if to is not None:
            records = read_each(connections, plans, read_record)
            unread = records.failed
            resolution = resolve(to, records.succeeded.values())
        wanted: dict[str, str | None] = (
            {name: resolution.wanted[name] for name in plans if name in resolution.wanted}
            if resolution
            else dict.fromkeys(plans)
        )

        def one(name: str) -> Outcome:
            deployment = deployment_of(
                inputs, connections, plans[name], options, progress, prompts, cancel, clock
            )
            return TargetRun(deployment).rollback(wanted[name])

        parallel = RolloutPlan.of(inputs.playbook.rollout, len(plans)).parallel
        group = fan_out(list(wanted), one, parallel)
        failed = {**unread, **group.failed}
        skipped = resolution.skipped if resolution else {}

        def outcome(name: str) -> Outcome:
            if name in group.succeeded:
                return group.succeeded[name]
            if name in skipped:
                return Outcome(name, plans[name].host, result="skipped", notes=[skipped[name]])
            return _unreached(plans[name], failed[name])

        outcomes = [outcome(name) for name in plans]
        return Acted(outcomes, partial(RollbackRun, to=resolution))

    return run("rollback", inputs, options, connect, progress, cancel, act)
