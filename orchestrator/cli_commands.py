"""The bodies of the CLI's commands that work on containers, from loaded inputs to
one result document.

The CLI parses and prints; these functions connect (through the `connect` they are
given), act, and return `(document, exit_code)`. The document is what `--json` prints.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from orchestrator import documents, preflight, release, runlog
from orchestrator.cancel import Cancel
from orchestrator.connections import SSH, Connect, Pool
from orchestrator.container import lock
from orchestrator.container import release as store
from orchestrator.container.journal import UNKNOWN_RUN, Journal, Transaction, Unreadable
from orchestrator.container.lock import Owner, lock_holder
from orchestrator.container.server import Server
from orchestrator.container.status import read_status
from orchestrator.deadline import now
from orchestrator.deploy import Options, ShowDiff, TargetRun
from orchestrator.documents import TargetState
from orchestrator.documents.fleet import (
    Deploying,
    KeptReleaseEntry,
    LeftOn,
    NothingToVerify,
    RecordedFleetRun,
    Releases,
    ReleasesTarget,
    ReleaseState,
    Status,
    StatusTarget,
    Unlock,
    Unlocked,
    Unreached,
    UnreachedStatus,
    Verified,
    Verify,
)
from orchestrator.documents.runs import (
    DeployRun,
    InterruptedRun,
    InterruptedTarget,
    RollbackRun,
    Run,
    ServerRun,
)
from orchestrator.drafters.findings import Finding, Severity
from orchestrator.drafters.modelfiles import parse_json_document
from orchestrator.errors import InputError, NeedsAttention, OrchError
from orchestrator.fanout import READ_PARALLEL, GroupResult, fan_out
from orchestrator.history import History, check_writable, new_run_id
from orchestrator.inventory import Inventory, load_inventory
from orchestrator.layout import DRAFTER_CONFIG, LAUNCH_SCRIPT, SECRETS_FILE, VIEW_CONFIG
from orchestrator.lifecycle import Action, ServerActionRun
from orchestrator.outcome import Outcome
from orchestrator.plan import TargetPlan, plan_deploy
from orchestrator.playbook import Playbook, find_playbook, load_playbook
from orchestrator.probes import load_passages, load_prompts
from orchestrator.probes.context import context_buckets
from orchestrator.progress import Progress
from orchestrator.rollout import RolloutPlan, RolloutRun, run_rollout
from orchestrator.runs import TargetRecord, fleet_runs, resolve
from orchestrator.secrets import digest, parse_exports
from orchestrator.secrets import resolve as resolve_secrets
from orchestrator.transport.base import Transport

DEFAULT_NVIDIA_SMI = "/usr/bin/nvidia-smi"
R = TypeVar("R", bound=TargetRun)


@dataclass(frozen=True)
class Inputs:
    playbook: Playbook
    inventory: Inventory
    plans: list[TargetPlan]
    playbook_ref: str
    """The playbook as the user named it (a name or a path)."""
    inventory_path: Path

    def deploy_command(self, container: str | None = None) -> str:
        """`orch deploy PLAYBOOK -i INVENTORY [--limit C] [--set ...]` with the paths and
        values given here, for a hint the operator can paste."""
        sets = [arg for a in self.playbook.assignments for arg in ("--set", a)]
        limit = ["--limit", container] if container else []
        inventory = str(self.inventory_path)
        return shlex.join(["orch", "deploy", self.playbook_ref, "-i", inventory, *limit, *sets])


def load(
    playbook: str,
    inventory: Path,
    limit: list[str],
    assignments: list[str],
    with_secrets: bool = False,
) -> Inputs:
    """`with_secrets` reads the playbook's secrets now (a command that writes or compares
    releases needs them; one that only reads the containers does not)."""
    book = load_playbook(find_playbook(playbook), assignments)
    inv = load_inventory(inventory)
    values = resolve_secrets(book) if with_secrets else None
    return Inputs(book, inv, plan_deploy(book, inv, limit, values), playbook, inventory)


def check_replace(inputs: Inputs, other: str) -> None:
    """`--replace` names another playbook that loads: bad input before anything is touched."""
    book = load_playbook(find_playbook(other), [])
    if book.name == inputs.playbook.name:
        raise InputError(f"--replace {other}: that is the playbook being deployed")


def _target_run(
    run_class: type[R],
    inputs: Inputs,
    connections: Pool,
    plan: TargetPlan,
    options: Options,
    progress: Progress,
    prompts: list[str],
    cancel: Cancel,
    show_diff: ShowDiff = lambda *_: None,
) -> R:
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

    def neighbour(playbook: str) -> TargetRun | None:
        """Another playbook's run on this container (deploy --replace, its recovery)."""
        try:
            other = load(playbook, inputs.inventory_path, [plan.container], [])
        except OrchError:
            return None
        if not other.plans or other.playbook.name == inputs.playbook.name:
            return None
        return _target_run(
            TargetRun,
            other,
            connections,
            other.plans[0],
            options,
            progress,
            load_prompts(other.playbook.gate.probe.prompts),
            cancel,
        )

    return run_class(
        plan,
        connections.container(plan.container),
        inputs.playbook,
        buckets,
        nvidia_smi,
        options,
        progress,
        cancel,
        show_diff,
        neighbour,
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


def _exit_code(outcomes: list[Outcome], cancel: Cancel) -> int:
    """The worst of the containers' exit codes; an interrupt's own when there was one."""
    return cancel.exit_code if cancel.requested else max((o.exit_code for o in outcomes), default=0)


def _run_fields(
    inputs: Inputs, run_id: str, started: str, outcomes: list[Outcome], code: int
) -> dict[str, Any]:
    """What every run's document says of the run and its inputs (RunDocument's fields)."""
    drafter = inputs.playbook.drafter
    return dict(
        playbook=inputs.playbook.name,
        run_id=run_id,
        started=started,
        method=drafter.kind,
        drafter=drafter.profile or drafter.weights,
        model=inputs.playbook.target.served_name,
        inventory=str(inputs.inventory_path.resolve()),
        assignments=list(inputs.playbook.assignments),
        result=documents.run_result(code),
        targets=outcomes,
    )


def _remember(document: Run, command: str, user: str) -> None:
    """History is a record, not the change: failing to write it only warns. A run this
    one recovered (it died in its switch, before its own row) is recorded too, as the
    containers' records show it: interrupted, and where its recovery left each."""
    try:
        History().record(document, command, user)
        for interrupted in _recovered_runs(document):
            History().record_if_missing(interrupted, "deploy", user)
    except NeedsAttention as exc:
        document.warnings.append(str(exc))


def _recovered_runs(document: Run) -> list[InterruptedRun]:
    runs: dict[str, InterruptedRun] = {}
    for target in document.targets:
        recovered = target.recovered
        if not recovered or recovered["run_id"] == UNKNOWN_RUN:
            continue  # none, or a run the container could not name (unreadable journal)
        run = runs.setdefault(
            recovered["run_id"],
            InterruptedRun(
                playbook=document.playbook,
                run_id=recovered["run_id"],
                started=recovered["started"],
                recovered_by=document.run_id,
                targets=[],
            ),
        )
        run.targets.append(
            InterruptedTarget(
                name=target.name,
                step=recovered.get("step"),
                release=recovered.get("to_release"),
                current=recovered.get("back_on"),
            )
        )
    return list(runs.values())


def _open_log(command: str, inputs: Inputs, options: Options) -> runlog.RunLog:
    """The run's local log, started with what runs where (the oldest logs beyond
    runlog.KEPT make room for it)."""
    runlog.prune()
    log = runlog.RunLog(options.run_id)
    mode = " (dry run)" if options.dry_run else ""
    targets = ", ".join(f"{p.container} on {p.host}" for p in inputs.plans)
    log.note("", f"{command}{mode} {inputs.playbook.name} by {options.user}: {targets}")
    return log


def _close_log(log: runlog.RunLog, document: Run, code: int) -> None:
    """Each container's outcome and the run's result end the log; the document says
    where it is (and, if it could not be written, why)."""
    for target in document.targets:
        gate = target.gate
        judged = f", gate {gate.verdict.outcome}: {gate.verdict.reason}" if gate else ""
        error = f": {target.error}" if target.error else ""
        log.note(target.name, f"result {target.result}{judged}{error}")
    log.note("", f"result {document.result} (exit {code})")
    document.log = None if log.warning else str(log.path)  # never a path it did not write
    if log.warning:
        document.warnings.append(log.warning)


def deploy(
    inputs: Inputs,
    options: Options,
    connect: Connect,
    progress: Progress,
    cancel: Cancel,
    show_diff: ShowDiff = lambda *_: None,
) -> tuple[DeployRun, int]:
    """With `options.diff`, `show_diff` gets each container's diff before its switch."""
    prompts = load_prompts(inputs.playbook.gate.probe.prompts)
    if not options.dry_run:
        check_writable()
    started = now()
    plans = {p.container: p for p in inputs.plans}
    log = _open_log("deploy", inputs, options)
    progress = log.recording(progress)
    with connect(inputs.inventory, log) as connections:

        def one(name: str) -> Outcome:
            run = _target_run(
                TargetRun,
                inputs,
                connections,
                plans[name],
                options,
                progress,
                prompts,
                cancel,
                show_diff,
            )
            return run.deploy()

        rollout = _rolled_out(inputs, plans, cancel, one)
        usage = connections.usage()
    code = _exit_code(rollout.outcomes, cancel)
    document = DeployRun(
        **_run_fields(inputs, options.run_id, started, rollout.outcomes, code),
        rollout=rollout,
        connections=usage,
    )
    _close_log(log, document, code)
    if not options.dry_run:
        _remember(document, "deploy", options.user)
    return document, code


def diff_exit_code(document: DeployRun, dry_run_code: int) -> int:
    """`orch diff`'s exit status, as `kubectl diff`'s: 0 nothing would change, 1 something
    would, 2 or more an error. A dry run's 1 (preflight found an error) is an error here."""
    if dry_run_code == 1:
        return 2
    if dry_run_code:
        return dry_run_code
    return 1 if any(target.diff for target in document.targets) else 0


def server_action(
    inputs: Inputs,
    options: Options,
    action: Action,
    connect: Connect,
    progress: Progress,
    cancel: Cancel,
) -> tuple[ServerRun, int]:
    """`orch stop|start|restart|remove` on every selected container, in the rollout's
    order (canaries first, then waves, within its failure budget): a rolling restart."""
    prompts = load_prompts(inputs.playbook.gate.probe.prompts)
    check_writable()
    started = now()
    plans = {p.container: p for p in inputs.plans}
    log = _open_log(action, inputs, options)
    progress = log.recording(progress)
    with connect(inputs.inventory, log) as connections:

        def one(name: str) -> Outcome:
            run = _target_run(
                ServerActionRun,
                inputs,
                connections,
                plans[name],
                options,
                progress,
                prompts,
                cancel,
            )
            return run.act(action)

        rollout = _rolled_out(inputs, plans, cancel, one)
    code = _exit_code(rollout.outcomes, cancel)
    document = ServerRun(
        **_run_fields(inputs, options.run_id, started, rollout.outcomes, code),
        action=action,
        rollout=rollout,
    )
    _close_log(log, document, code)
    _remember(document, action, options.user)
    return document, code


def _rolled_out(
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
) -> tuple[RollbackRun, int]:
    """Each container back to its previous release, or with `to` (a run id, a release
    id, or a unique prefix) to what that run left it on. `to` is resolved from every
    container's records before anything is switched: an unknown or ambiguous id is
    an InputError with nothing touched."""
    prompts = load_prompts(inputs.playbook.gate.probe.prompts)
    check_writable()
    started = now()
    plans = {p.container: p for p in inputs.plans}
    log = _open_log("rollback", inputs, options)
    progress = log.recording(progress)
    with connect(inputs.inventory, log) as connections:
        unread: dict[str, OrchError] = {}
        resolution = None
        if to is not None:
            records = read_each(connections, plans, _record)
            unread = records.failed
            resolution = resolve(to, records.succeeded.values())
        wanted: dict[str, str | None] = (
            {name: resolution.wanted[name] for name in plans if name in resolution.wanted}
            if resolution
            else dict.fromkeys(plans)
        )

        def one(name: str) -> Outcome:
            run = _target_run(
                TargetRun, inputs, connections, plans[name], options, progress, prompts, cancel
            )
            return run.rollback(wanted[name])

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
    code = _exit_code(outcomes, cancel)
    document = RollbackRun(
        **_run_fields(inputs, options.run_id, started, outcomes, code), to=resolution
    )
    _close_log(log, document, code)
    _remember(document, "rollback", options.user)
    return document, code


T = TypeVar("T")
E = TypeVar("E")


def read_each(
    connections: Pool, plans: dict[str, TargetPlan], read: Callable[[Transport, TargetPlan], T]
) -> GroupResult[T]:
    """`read` on every container, side by side."""
    return fan_out(
        list(plans), lambda name: read(connections.container(name), plans[name]), READ_PARALLEL
    )


@dataclass(frozen=True)
class FleetRead(Generic[T]):
    """What a read of every container found: per container, what `read` returned or
    the error that stopped it."""

    plans: dict[str, TargetPlan]
    group: GroupResult[T]

    def entries(
        self, found: Callable[[TargetPlan, T], E], failed: Callable[[TargetPlan, OrchError], E]
    ) -> list[E]:
        """One document entry per container, in the inventory's order."""
        return [
            found(plan, self.group.succeeded[name])
            if name in self.group.succeeded
            else failed(plan, self.group.failed[name])
            for name, plan in self.plans.items()
        ]


def fleet_read(
    inputs: Inputs, connect: Connect, read: Callable[[Transport, TargetPlan], T]
) -> FleetRead[T]:
    """The read-only commands' skeleton: connect, read every container, close."""
    plans = {p.container: p for p in inputs.plans}
    with connect(inputs.inventory, None) as connections:
        return FleetRead(plans, read_each(connections, plans, read))


def _record(transport: Transport, plan: TargetPlan) -> TargetRecord:
    return release.record(transport, plan.layout, plan.container)


def _unreachable(plan: TargetPlan, exc: OrchError) -> Unreached:
    return Unreached(
        name=plan.container,
        host=plan.host,
        result="unreachable",
        error=exc.message_for(plan.container),
    )


def releases(inputs: Inputs, connect: Connect = SSH) -> tuple[Releases, int]:
    """Per run, newest first, the release it left each container on and whether that
    release is still kept and current; per container, its kept releases, including
    those no recorded run names."""
    read = fleet_read(inputs, connect, _record)
    records = read.group.succeeded
    runs = fleet_runs(records.values())
    named = {(name, r.current) for run in runs for name, r in run.targets.items()}

    def found(plan: TargetPlan, record: TargetRecord) -> ReleasesTarget | Unreached:
        return ReleasesTarget(
            name=plan.container,
            host=plan.host,
            current=record.current,
            kept=[
                KeptReleaseEntry(
                    release=k.release,
                    created=k.created,
                    made_by_run=k.run_id,
                    current=k.release == record.current,
                    named_by_a_run=(plan.container, k.release) in named,
                )
                for k in reversed(record.kept)
            ],
        )

    code = 3 if read.group.failed else 0
    document = Releases(
        playbook=inputs.playbook.name,
        result=documents.run_result(code),
        runs=[
            RecordedFleetRun(
                run_id=run.run_id,
                time=run.time,
                user=run.user,
                action=run.action,
                targets=[
                    LeftOn(
                        name=name,
                        result=record.result,
                        release=record.current,
                        release_state=_release_state(records[name], record.current),
                    )
                    for name, record in run.targets.items()
                ],
            )
            for run in runs
        ],
        targets=read.entries(found, _unreachable),
    )
    return document, code


def _release_state(record: TargetRecord, release_id: str | None) -> ReleaseState:
    """`current`, `kept` or `pruned` (a release no longer on the container); `none`
    when the run left nothing serving there."""
    if release_id is None:
        return "none"
    if release_id == record.current:
        return "current"
    return "kept" if release_id in record.kept_ids else "pruned"


def verify_remote(inputs: Inputs, connect: Connect = SSH) -> tuple[Verify, int]:
    """Each container's current release against its own manifest (a hand edit:
    `changed_on_target`, exit 1), then the manifest against a fresh render of the
    playbook as it is now (`playbook_differs`: informational), plus the drafter
    checks on the files as they are on the container."""

    def one(transport: Transport, plan: TargetPlan) -> tuple[Verified | NothingToVerify, int]:
        entry, code = _verify_one(transport, plan, inputs.playbook)
        if isinstance(entry, Verified) and entry.playbook_differs:
            entry.apply_with = inputs.deploy_command(plan.container)
        return entry, code

    read = fleet_read(inputs, connect, one)
    codes = [code for _, code in read.group.succeeded.values()]
    code = max([*codes, *(e.exit_code for e in read.group.failed.values())], default=0)
    targets: list[Verified | NothingToVerify | Unreached] = read.entries(
        lambda _, verified: verified[0], _unreachable
    )
    document = Verify(
        playbook=inputs.playbook.name, result=documents.run_result(code), targets=targets
    )
    return document, code


VERIFIED_NAMES = [release.MANIFEST, DRAFTER_CONFIG, LAUNCH_SCRIPT, VIEW_CONFIG]


def _verify_one(
    transport: Transport, plan: TargetPlan, playbook: Playbook
) -> tuple[Verified | NothingToVerify, int]:
    journal = Journal(transport, plan.layout).read()
    interrupted = journal.describe() if journal else None
    current = store.linked(transport, plan.layout.current)
    if not current:  # a state, as in `status`: nothing deployed has nothing drifted
        nothing = NothingToVerify(
            name=plan.container, host=plan.host, interrupted=interrupted, release=None
        )
        return nothing, 3 if journal else 0
    actual = store.read_back(transport, plan.layout.release(current), VERIFIED_NAMES)
    applied = release.Applied.parse(actual.pop(release.MANIFEST, None))
    changed, differs = drift(plan, current, applied, actual)
    if applied is not None:
        on_target = release.read_secrets(transport, plan.layout.release(current))
        changed += _secrets_changed(plan, applied, on_target)
    findings = _remote_findings(transport, plan, playbook, actual.get(DRAFTER_CONFIG))
    findings += preflight.server_check_of_release(
        transport, plan, current, actual.get(LAUNCH_SCRIPT)
    )
    bad = changed or any(f.severity == Severity.ERROR for f in findings)
    verified = Verified(
        name=plan.container,
        host=plan.host,
        interrupted=interrupted,
        release=current,
        applied=applied,
        changed_on_target=changed,
        playbook_differs=differs,
        findings=findings,
        result="drift" if bad else "ok",
    )
    return verified, 3 if journal else (1 if bad else 0)


def drift(
    plan: TargetPlan, current: str, applied: release.Applied | None, actual: dict[str, bytes]
) -> tuple[list[str], list[str]]:
    """(changed on the target since the run that applied the release, what the playbook
    now renders differently from what that run applied). Without a readable manifest
    the files can only be compared with a fresh render, and that is said."""
    rendered = plan.read_back_files
    if applied is None:
        mismatches = release.compare(rendered, actual, plan.kind.key_fields)
        return [f"no readable manifest, compared with a fresh render: {m}" for m in mismatches], []
    since = f"run {applied.run_id}"
    known = {n: d for n, d in rendered.items() if release.sha256(d) == applied.files.get(n)}
    changed = [
        f"changed on the target since {since}: {m}"
        for m in release.compare_hashes(
            applied.files, known, actual, plan.kind.key_fields, f"applied by {since}"
        )
    ]
    if current == plan.release_id:
        return changed, []
    differs = []
    for name in sorted(set(plan.files) | (set(applied.files) - {VIEW_CONFIG})):
        digest = applied.files.get(name)
        if name in plan.files and release.sha256(plan.files[name]) == digest:
            continue
        on_target = actual.get(name)
        was = on_target if on_target and release.sha256(on_target) == digest else None
        diff = (
            release.unified_diff(
                was, plan.files[name], f"{name} (applied by {since})", f"{name} (rendered now)"
            )
            if was is not None and name in plan.files
            else ""
        )
        what = "no longer rendered" if name not in plan.files else "renders differently"
        differs.append(
            f"{name}: the playbook now differs from what {since} applied ({what})"
            + (f"\n{diff}" if diff else "")
        )
    differs += [
        f"secret {name}: the source now gives digest {plan.secrets.get(name, '-')[:12]}, "
        f"{since} applied {applied.secrets.get(name, '-')[:12]} (rotated, not deployed)"
        for name in sorted(plan.secrets.keys() | applied.secrets.keys())
        if plan.secrets.get(name) != applied.secrets.get(name)
    ]
    if not differs:
        differs.append(
            f"the playbook now makes release {plan.release_id}, not {current} that {since} "
            "applied (the same files, other inputs)"
        )
    return changed, differs


def _secrets_changed(
    plan: TargetPlan, applied: release.Applied, on_target: bytes | None
) -> list[str]:
    """The release's secrets file against the digests its manifest recorded."""
    if not applied.secrets:
        return []
    since = f"run {applied.run_id}"
    if on_target is None:
        return [f"changed on the target since {since}: {SECRETS_FILE}: missing on the target"]
    values = parse_exports(on_target)
    return [
        f"changed on the target since {since}: {SECRETS_FILE}: secret {name} differs "
        "from what was applied"
        for name, recorded in sorted(applied.secrets.items())
        if name not in values or digest(values[name], plan.playbook, name) != recorded
    ]


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


def status(inputs: Inputs, connect: Connect = SSH) -> tuple[Status, int]:
    """Where each container stands. Nothing deployed yet is a state, not a problem; a run
    in progress is `deploying`, not a fault."""
    read = fleet_read(
        inputs, connect, lambda t, plan: _status_entry(t, plan, inputs.playbook.lock_lease)
    )
    targets: list[StatusTarget | UnreachedStatus] = read.entries(
        lambda _, entry: entry,
        lambda plan, exc: UnreachedStatus(
            name=plan.container, host=plan.host, error=exc.message_for(plan.container)
        ),
    )
    code = 0 if all(_as_meant(t) for t in targets) else 3
    return Status(
        playbook=inputs.playbook.name,
        result=documents.run_result(code),
        state=_fleet_state([t.state for t in targets]),
        targets=targets,
    ), code


def _as_meant(target: StatusTarget | UnreachedStatus) -> bool:
    """Serving, nothing deployed yet, a run at work, or stopped by `orch stop` (its last
    run a stop, or an interrupted stop finished): no one needs to look."""
    if target.state in ("serving", "nothing_deployed", "deploying"):
        return True
    last = (target.last_run if isinstance(target, StatusTarget) else None) or {}
    return target.state == "stopped" and (
        last.get("action") == "stop" or last.get("result") == "stopped"
    )


_STATE_ORDER = (
    "interrupted",
    "unreachable",
    "stopped",
    "unhealthy",
    "deploying",
    "serving",
    "nothing_deployed",
)


def _fleet_state(states: list[TargetState]) -> TargetState:
    """The fleet's state: nothing deployed only when that holds everywhere, else the
    most pressing of its containers' states."""
    if states and set(states) == {"nothing_deployed"}:
        return "nothing_deployed"
    return min(states, key=_STATE_ORDER.index, default="nothing_deployed")


def _status_entry(transport: Transport, plan: TargetPlan, lease: float | None) -> StatusTarget:
    """The journal first: a transaction whose run is provably gone is the first thing to
    know; one whose run still holds the lock is that run at work."""
    journal = Journal(transport, plan.layout).read()
    entry = read_status(transport, plan.layout)
    owner = Owner.parse(entry["lock"] or "")
    # Status reads no heartbeat: a lock is live unless its owner's process on this
    # machine is provably gone (the lease is the deploy's to judge, on the container).
    live = owner if owner and owner.gone(0.0) is None else None
    server = Server(transport, plan.layout, plan.address, plan.port)
    facts = {
        "release": entry["release"],
        "server": entry["server"],
        "pid": entry["pid"],
        "release_gate": entry["release_gate"],
        "last_run": entry["last_run"],
        "lock": lock_holder(str(entry["lock"] or "")),
        "deploying": _deploying(live, journal) if live else None,
        "interrupted": journal.describe() if journal and not live else None,
        "health": _health(server) if entry["server"] == "running" else None,
    }
    if entry["release_missing"]:
        facts["error"] = f"current points at release {entry['release']}, whose dir is missing"
    return StatusTarget.model_validate(
        {"name": plan.container, "host": plan.host, **facts, "state": _target_state(facts)}
    )


def _deploying(owner: Owner, journal: Transaction | Unreadable | None) -> Deploying:
    """The run holding the lock, and the step its journal says when it is that run's."""
    mine = isinstance(journal, Transaction) and journal.run_id == owner.run_id
    return Deploying(
        run_id=owner.run_id,
        step=journal.step if mine and isinstance(journal, Transaction) else None,
        owner=f"{owner.user}@{owner.control_host}",
        elapsed=round(max(0.0, time.time() - owner.since), 1),
    )


def _target_state(facts: dict[str, Any]) -> TargetState:
    if facts["interrupted"]:
        return "interrupted"
    if facts.get("error"):  # `current` names a release whose dir is gone: not serving it
        return "unhealthy" if facts["server"] == "running" else "stopped"
    if facts["deploying"]:
        return "deploying"
    if facts["server"] != "running":
        return "nothing_deployed" if facts["release"] is None else "stopped"
    return "serving" if facts["health"] == 200 else "unhealthy"


def _health(server: Server) -> int | None:
    """/health's status; None when it did not answer at all."""
    try:
        return server.health()
    except OrchError:
        return None


def unlock(inputs: Inputs, connect: Connect = SSH) -> tuple[Unlock, int]:
    """Every container's lock removed (saying whose it was), reachable or not."""
    read = fleet_read(inputs, connect, lambda transport, plan: lock.remove(transport, plan.layout))
    targets: list[Unlocked | Unreached] = read.entries(
        lambda plan, owner: Unlocked(
            name=plan.container, host=plan.host, removed_lock=lock_holder(owner)
        ),
        lambda plan, exc: Unreached(
            name=plan.container,
            host=plan.host,
            result="error",
            error=exc.message_for(plan.container),
        ),
    )
    code = max((e.exit_code for e in read.group.failed.values()), default=0)
    return Unlock(
        playbook=inputs.playbook.name, result=documents.run_result(code), targets=targets
    ), code
