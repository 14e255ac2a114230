"""Fleet runs, read from the targets' own records: which release each run left each
container on, and what a `rollback --to ID` means for each container.

A deploy or rollback run has one id (`Options.run_id`). On every container where it
reached a decision (deployed, unchanged, rolled back, failed its gate) it appends
one line to that container's `audit.log` naming the release it left `current` on
(orchestrator/container/audit.py writes and parses them).
Read back from every container, those lines name the fleet's state after each run.
The targets are the record (operators deploy from several machines); the local
history is only a cache of what this machine ran. Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import pydantic
from pydantic import Field

from orchestrator import remotejson
from orchestrator.container.audit import AuditRecord
from orchestrator.errors import InputError


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class KeptRelease:
    """A release dir on a container, with what its manifest says (if it is readable)."""

    release: str
    created: str | None = None
    run_id: str | None = None
    """The run that wrote it."""


def parse_manifest_summary(release_id: str, raw: bytes | None) -> KeptRelease:
    try:
        manifest = remotejson.loads(raw or b"null")
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict):
        return KeptRelease(release_id)
    return KeptRelease(release_id, _text(manifest.get("created")), _text(manifest.get("run_id")))


@dataclass(frozen=True)
class TargetRecord:
    """What one container holds: its current release, its kept releases (oldest
    first) and its audit records (oldest first)."""

    name: str
    current: str | None
    kept: list[KeptRelease]
    records: list[AuditRecord]

    @property
    def kept_ids(self) -> list[str]:
        return [k.release for k in self.kept]


@dataclass(frozen=True)
class FleetRun:
    """One run across the fleet: its last record on each container it decided on."""

    run_id: str
    time: str
    user: str
    action: str
    targets: dict[str, AuditRecord] = field(default_factory=dict)


def fleet_runs(targets: Iterable[TargetRecord]) -> list[FleetRun]:
    """Every run named on any container, newest first (a run that recovered an
    interrupted one before its own work has two lines: the last one is its result)."""
    by_run: dict[str, list[tuple[str, AuditRecord]]] = {}
    for target in targets:
        for record in target.records:
            by_run.setdefault(record.run_id, []).append((target.name, record))
    runs = []
    for run_id, named in by_run.items():
        first = min((record for _, record in named), key=lambda r: r.time)
        last = named[-1][1]
        runs.append(FleetRun(run_id, first.time, first.user, last.action, dict(named)))
    return sorted(runs, key=lambda r: (r.time, r.run_id), reverse=True)


@pydantic.dataclasses.dataclass(frozen=True)
class Resolution:
    """What `rollback --to QUERY` does on each container, decided before any switch."""

    query: str
    run_id: str | None
    """The run whose state is restored; None for a release no recorded run left current."""
    release: str | None
    """The release id the query named, if it named one rather than a run."""
    wanted: Annotated[dict[str, str], Field(exclude=True)]
    """Container -> the release it is switched to."""
    skipped: Annotated[dict[str, str], Field(exclude=True)]
    """Container -> why it is left as it is."""


def resolve(query: str, targets: Iterable[TargetRecord]) -> Resolution:
    """A run id, a release id, or a unique prefix of either, to each container's release.

    A release id stands for the first run that left a container on it (the run that
    put it in place). Raises InputError (nothing touched) for an unknown or ambiguous
    id, and for a run whose release is no longer kept on one of its containers.
    """
    targets = list(targets)
    query = query.strip()
    if not query:
        raise InputError("--to: give a run id or a release id")
    runs = {run.run_id: run for run in fleet_runs(targets)}
    releases = {k.release for t in targets for k in t.kept} | {
        r.current for t in targets for r in t.records if r.current
    }
    kind, found = _match(query, runs, releases)
    if kind == "run":
        return _restore_run(query, runs[found], None, targets)
    first = next(
        (
            run
            for run in sorted(runs.values(), key=lambda r: (r.time, r.run_id))
            if any(record.current == found for record in run.targets.values())
        ),
        None,
    )
    if first is not None:
        return _restore_run(query, first, found, targets)
    wanted = {t.name: found for t in targets if found in t.kept_ids}
    skipped = {
        t.name: f"release {found} is not on {t.name}" for t in targets if t.name not in wanted
    }
    return Resolution(query, None, found, wanted, skipped)


def _match(query: str, runs: Mapping[str, FleetRun], releases: set[str]) -> tuple[str, str]:
    """('run' | 'release', id): an exact id first, else the one id the query begins."""
    ids = [("run", r) for r in runs] + [("release", r) for r in sorted(releases)]
    exact = [(kind, name) for kind, name in ids if name == query]
    if len(exact) == 1:
        return exact[0]
    candidates = exact or [(kind, name) for kind, name in ids if name.startswith(query)]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        known = ", ".join(list(runs)[:5]) or "none recorded on these containers"
        raise InputError(f"--to {query}: no run or release has this id (newest runs: {known})")
    named = ", ".join(f"{kind} {name}" for kind, name in candidates)
    raise InputError(f"--to {query}: ambiguous, it begins {len(candidates)} ids: {named}")


def _restore_run(
    query: str, run: FleetRun, release: str | None, targets: list[TargetRecord]
) -> Resolution:
    wanted, skipped, pruned = {}, {}, []
    for target in targets:
        record = run.targets.get(target.name)
        if record is None:
            skipped[target.name] = f"run {run.run_id} did not touch {target.name}"
        elif record.current is None:
            skipped[target.name] = f"run {run.run_id} left nothing serving on {target.name}"
        elif record.current not in target.kept_ids:
            pruned.append(
                f"{target.name}: {record.current} (kept: {', '.join(target.kept_ids) or 'none'})"
            )
        else:
            wanted[target.name] = record.current
    if pruned:
        raise InputError(
            f"--to {query}: run {run.run_id} left releases that are no longer kept: "
            + "; ".join(pruned)
            + " (nothing was switched; --limit leaves those containers out)"
        )
    return Resolution(query, run.run_id, release, wanted, skipped)
