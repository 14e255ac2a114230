"""What each remote command does, from loaded inputs to one result document.

The CLI parses and prints; these functions connect, act, and return
`(document, exit_code)`. The document is what `--json` prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from orchestrator import commands, preflight, release
from orchestrator.deploy import Options, Outcome, Progress, TargetRun
from orchestrator.drafters.findings import Finding, Severity
from orchestrator.drafters.modelfiles import parse_json_document
from orchestrator.errors import NeedsAttention, OrchError
from orchestrator.facts import parse_status_report
from orchestrator.inventory import Inventory, load_inventory
from orchestrator.plan import DRAFTER_CONFIG, TargetPlan, plan_deploy
from orchestrator.playbook import Playbook, find_playbook, load_playbook
from orchestrator.probes import load_prompts
from orchestrator.remote import run_step
from orchestrator.rollout import run_rollout
from orchestrator.server import Server
from orchestrator.state import History, new_run_id, now
from orchestrator.transport.base import Transport
from orchestrator.transport.pool import Connections

DEFAULT_NVIDIA_SMI = "/usr/bin/nvidia-smi"


@dataclass(frozen=True)
class Inputs:
    playbook: Playbook
    inventory: Inventory
    plans: list[TargetPlan]


def load(playbook: str, inventory: Path, limit: list[str], assignments: list[str]) -> Inputs:
    book = load_playbook(find_playbook(playbook), assignments)
    inv = load_inventory(inventory)
    return Inputs(book, inv, plan_deploy(book, inv, limit))


def _target_run(
    inputs: Inputs,
    connections: Connections,
    plan: TargetPlan,
    options: Options,
    progress: Progress,
    prompts: list[str],
) -> TargetRun:
    nvidia_smi = inputs.inventory.container_vars(plan.container).get(
        "nvidia_smi", DEFAULT_NVIDIA_SMI
    )
    return TargetRun(
        plan,
        connections.container(plan.container),
        inputs.playbook,
        prompts,
        nvidia_smi,
        options,
        progress,
    )


def _guarded(plan: TargetPlan, action: Callable[[], Outcome]) -> Outcome:
    """A target that cannot even be reached is that target's outcome, not the run's end."""
    try:
        return action()
    except OrchError as exc:
        return Outcome(
            plan.container,
            plan.host,
            release=plan.release_id,
            error=str(exc),
            exit_code=exc.exit_code,
        )


def _document(
    inputs: Inputs, run_id: str, started: str, outcomes: list[Outcome]
) -> tuple[dict[str, Any], int]:
    code = max((o.exit_code for o in outcomes), default=0)
    result = {0: "ok", 1: "not applied", 2: "bad input", 3: "needs attention"}[code]
    drafter = inputs.playbook.drafter
    return {
        "playbook": inputs.playbook.name,
        "run_id": run_id,
        "started": started,
        "method": drafter.kind,
        "drafter": drafter.profile or drafter.weights,
        "model": inputs.playbook.target.served_name,
        "result": result,
        "targets": [o.to_dict() for o in outcomes],
    }, code


def _remember(document: dict[str, Any], command: str, user: str) -> None:
    """History is a record, not the change: failing to write it only warns."""
    try:
        History().record(document, command, user)
    except NeedsAttention as exc:
        document.setdefault("warnings", []).append(str(exc))


def deploy(
    inputs: Inputs,
    options: Options,
    accept_new_host_keys: bool,
    progress: Progress,
) -> tuple[dict[str, Any], int]:
    prompts = load_prompts(inputs.playbook.gate.probe.prompts)
    started = now()
    plans = {p.container: p for p in inputs.plans}
    with Connections(inputs.inventory, accept_new_host_keys) as connections:

        def one(name: str) -> Outcome:
            plan = plans[name]
            return _guarded(
                plan,
                lambda: _target_run(inputs, connections, plan, options, progress, prompts).deploy(),
            )

        def skipped(name: str) -> Outcome:
            return Outcome(
                name,
                plans[name].host,
                result="skipped",
                exit_code=0,
                error="not started: the rollout's failure budget was spent",
            )

        outcomes = run_rollout(list(plans), inputs.playbook.rollout, one, skipped)
    document, code = _document(inputs, options.run_id, started, outcomes)
    if not options.dry_run:
        _remember(document, "deploy", options.user)
    return document, code


def rollback(
    inputs: Inputs, options: Options, to: str | None, accept_new_host_keys: bool, progress: Progress
) -> tuple[dict[str, Any], int]:
    prompts = load_prompts(inputs.playbook.gate.probe.prompts)
    started = now()
    outcomes = []
    with Connections(inputs.inventory, accept_new_host_keys) as connections:
        for plan in inputs.plans:
            run = _target_run(inputs, connections, plan, options, progress, prompts)
            outcomes.append(_guarded(plan, partial(run.rollback, to)))
    document, code = _document(inputs, options.run_id, started, outcomes)
    _remember(document, "rollback", options.user)
    return document, code


def verify_remote(inputs: Inputs, accept_new_host_keys: bool) -> tuple[dict[str, Any], int]:
    """Drift of each container's current release against a fresh render, plus the
    drafter checks on the files as they are on the container."""
    targets = []
    code = 0
    with Connections(inputs.inventory, accept_new_host_keys) as connections:
        for plan in inputs.plans:
            entry: dict[str, Any] = {"name": plan.container, "host": plan.host}
            try:
                transport = connections.container(plan.container)
                current = release.linked(transport, f"{plan.deployment_dir}/current")
                entry["release"] = current or None
                if not current:
                    entry["drift"] = ["no current release: nothing deployed yet"]
                    code = max(code, 1)
                    targets.append(entry)
                    continue
                release_dir = f"{plan.deployment_dir}/releases/{current}"
                expected = plan.read_back_files
                actual = release.read_back(transport, release_dir, list(expected))
                entry["drift"] = [
                    str(m) for m in release.compare(expected, actual, plan.kind.key_fields)
                ]
                findings = _remote_findings(
                    transport, plan, inputs.playbook, actual.get(DRAFTER_CONFIG)
                )
                entry["findings"] = [f.to_dict() for f in findings]
                bad = entry["drift"] or any(f.severity == Severity.ERROR for f in findings)
                code = max(code, 1 if bad else 0)
            except OrchError as exc:
                entry["error"] = str(exc)
                code = max(code, exc.exit_code)
            targets.append(entry)
    return {"playbook": inputs.playbook.name, "ok": code == 0, "targets": targets}, code


def _remote_findings(
    transport: Transport, plan: TargetPlan, playbook: Playbook, config: bytes | None
) -> list[Finding]:
    """The drafter checks on the config as deployed, against the target as it is there."""
    if DRAFTER_CONFIG in plan.files:
        if config is None:
            return []  # reported as drift
        parsed, findings = parse_json_document(config, f"{plan.drafter_view}/{DRAFTER_CONFIG}")
        if parsed is None:
            return findings
        plan = dataclasses.replace(plan, drafter_config=parsed)
    drafter = plan.drafter_weights
    return preflight.drafter_findings(
        preflight.read_model_dir(transport, plan.target_dir),
        preflight.read_model_dir(transport, drafter) if drafter else None,
        plan,
        playbook.server.num_speculative_tokens,
    )


def new_options(**kwargs: Any) -> Options:
    return Options(run_id=new_run_id(), **kwargs)


def status(inputs: Inputs, accept_new_host_keys: bool) -> tuple[list[dict[str, Any]], int]:
    rows, code = [], 0
    with Connections(inputs.inventory, accept_new_host_keys) as connections:
        for plan in inputs.plans:
            row: dict[str, Any] = {"container": plan.container, "host": plan.host}
            try:
                transport = connections.container(plan.container)
                result = transport.run(commands.status_report(plan.deployment_dir), timeout=60)
                row.update(parse_status_report(result.text))
                server = Server(transport, plan.deployment_dir, plan.address, plan.port)
                row["health"] = _health(server) if row["server"] == "running" else "-"
                if row["server"] != "running" or row["health"] != 200:
                    code = 3
            except OrchError as exc:
                row["error"], code = str(exc), 3
            rows.append(row)
    return rows, code


def _health(server: Server) -> int | str:
    try:
        return server.health()
    except OrchError:
        return "unreachable"


def unlock(inputs: Inputs, accept_new_host_keys: bool) -> list[tuple[str, str]]:
    removed = []
    with Connections(inputs.inventory, accept_new_host_keys) as connections:
        for plan in inputs.plans:
            transport = connections.container(plan.container)
            lock_dir = f"{plan.deployment_dir}/lock"
            owner = release.read_back(transport, lock_dir, ["owner.json"]).get("owner.json", b"")
            run_step(transport, commands.release_lock(lock_dir), "remove lock")
            removed.append((plan.container, owner.decode("utf-8", "replace")))
    return removed
