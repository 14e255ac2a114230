"""`orch releases`: per run, newest first, the release it left each container on, as
the containers' audit logs record it, and each container's kept releases."""

from __future__ import annotations

from orchestrator.connections import SSH, Connect
from orchestrator.contract import run_result
from orchestrator.documents.fleet import (
    KeptReleaseEntry,
    LeftOn,
    RecordedFleetRun,
    Releases,
    ReleasesTarget,
    ReleaseState,
    Unreached,
)
from orchestrator.fleet.inputs import Inputs
from orchestrator.fleet.read import fleet_read, unreachable
from orchestrator.plan import TargetPlan
from orchestrator.runs import TargetRecord, fleet_runs
from orchestrator.transaction import releases as release_files
from orchestrator.transport.base import Transport


def read_record(transport: Transport, plan: TargetPlan) -> TargetRecord:
    return release_files.record(transport, plan.layout, plan.container)


def releases(inputs: Inputs, connect: Connect = SSH) -> tuple[Releases, int]:
    """Per run, newest first, the release it left each container on and whether that
    release is still kept and current; per container, its kept releases, including
    those no recorded run names."""
    read = fleet_read(inputs, connect, read_record)
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
        result=run_result(code),
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
        targets=read.entries(found, unreachable),
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
