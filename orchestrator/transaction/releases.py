"""A release's files on the target, as a transaction handles them: written and
cat-verified, a kept one verified against its own manifest, its recorded gate settings
read and re-recorded, its secrets and API key read back; and a deployment's record of
runs and releases. What a release is and how it compares is orchestrator/release.py's;
how files get onto the container and back is orchestrator/container/store.py's."""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import TypeAdapter, ValidationError

from orchestrator import remotejson
from orchestrator.container import store
from orchestrator.container.pause import Decision
from orchestrator.contract import jsonable
from orchestrator.errors import NeedsAttention
from orchestrator.layout import DRAFTER_CONFIG, LAUNCH_SCRIPT, SECRETS_FILE, VIEW_CONFIG, Layout
from orchestrator.plan import TargetPlan
from orchestrator.release import (
    MANIFEST,
    MODES,
    RENDERED,
    Applied,
    GateTarget,
    Mismatch,
    changes,
    compare,
    compare_hashes,
    sha256,
)
from orchestrator.runs import TargetRecord, parse_manifest_summary
from orchestrator.secrets import ProbeKey, no_log, parse_exports, probe_key, register
from orchestrator.transport.base import Transport


def write(transport: Transport, plan: TargetPlan, files: Mapping[str, bytes]) -> None:
    """Each file streamed through stdin to a temp file, fsynced, renamed (the secrets
    file too, by the same write: mode 0600 from its creation, owned by the user that
    starts the server); then the view."""
    store.write(transport, plan.release_dir, files, MODES)
    if plan.secrets_file is not None:
        store.write(transport, plan.release_dir, {SECRETS_FILE: plan.secrets_file}, MODES)
    if DRAFTER_CONFIG in files and plan.drafter_weights:
        store.link_drafter_view(transport, plan.drafter_weights, plan.drafter_view)


def record(transport: Transport, layout: Layout, name: str) -> TargetRecord:
    """The container's record of runs and releases, read in one round trip."""
    records = store.read_records(transport, layout)
    return TargetRecord(
        name,
        records.current,
        [parse_manifest_summary(rid, records.manifests.get(rid)) for rid in records.releases],
        records.audit,
    )


def gate_target(
    transport: Transport, layout: Layout, release_id: str, fallback: GateTarget
) -> GateTarget:
    """The release's own gate settings from its manifest; `fallback` for a release made
    before manifests recorded them, or whose manifest is unreadable."""
    raw = store.read_back(transport, layout.release(release_id), [MANIFEST]).get(MANIFEST)
    try:
        return TypeAdapter(GateTarget).validate_python(
            remotejson.loads(raw or b"null")["gate_target"]
        )
    except (ValueError, TypeError, KeyError, ValidationError):
        return fallback


def record_gate_target(
    transport: Transport, layout: Layout, release_id: str, gate: GateTarget, run_id: str
) -> None:
    """A re-gated release's manifest with its new gate settings and the run that set
    them; the rest of what was applied stays as it was."""
    fields = {"gate_target": jsonable(gate), "regated_by": run_id}
    _amend_manifest(transport, layout, release_id, fields, "its gate settings")


def record_promotion(
    transport: Transport, layout: Layout, release_id: str, decision: Decision
) -> None:
    """A release kept by a person's decision after an inconclusive gate: its manifest
    says who promoted it, when, and in which run."""
    fields = {"promoted": jsonable(decision)}
    _amend_manifest(transport, layout, release_id, fields, "its promotion")


def _amend_manifest(
    transport: Transport, layout: Layout, release_id: str, fields: dict[str, object], what: str
) -> None:
    """The release's manifest with `fields` (`what` they record) set; the rest as it
    was applied."""
    path = f"{layout.release(release_id)}/{MANIFEST}"
    raw = store.read_back(transport, layout.release(release_id), [MANIFEST]).get(MANIFEST)
    try:
        document = remotejson.loads(raw or b"null")
        document.update(fields)
    except (ValueError, TypeError, AttributeError):
        raise NeedsAttention(
            f"{path}: unreadable manifest, {what} cannot be recorded",
            subject=transport.label,
        ) from None
    store.write(
        transport,
        layout.release(release_id),
        {MANIFEST: (json.dumps(document, indent=2) + "\n").encode()},
        MODES,
    )


def verify_kept(transport: Transport, plan: TargetPlan, release_id: str) -> list[Mismatch]:
    """A kept release's files against the hashes its own manifest recorded, as a new
    release is cat-verified: a rollback checks its target so before anything stops.
    Where the playbook renders what the manifest recorded, a mismatch has its diff."""
    names = [MANIFEST, *plan.read_back_files]
    actual = store.read_back(transport, plan.layout.release(release_id), names)
    applied = Applied.parse(actual.pop(MANIFEST, None))
    if applied is None:
        return [Mismatch(MANIFEST, "missing or unreadable: the files cannot be verified")]
    rendered = plan.read_back_files
    known = {n: d for n, d in rendered.items() if sha256(d) == applied.files.get(n)}
    label = f"applied by run {applied.run_id}"
    return compare_hashes(applied.files, known, actual, plan.kind.key_fields, label)


def verify(transport: Transport, plan: TargetPlan, written: Mapping[str, bytes]) -> list[Mismatch]:
    """Cat-verify: read every written file back whole, plus the view's config, and the
    secrets file's values (compared in memory, never shown)."""
    expected = (
        {**written, VIEW_CONFIG: written[DRAFTER_CONFIG]} if DRAFTER_CONFIG in written else written
    )
    actual = store.read_back(transport, plan.release_dir, list(expected))
    return compare(expected, actual, plan.kind.key_fields) + _verify_secrets(transport, plan)


def _verify_secrets(transport: Transport, plan: TargetPlan) -> list[Mismatch]:
    if plan.secrets_file is None:
        return []
    actual = read_secrets(transport, plan.release_dir)
    if actual is None:
        return [Mismatch(SECRETS_FILE, "missing on the target")]
    want, got = parse_exports(plan.secrets_file), parse_exports(actual)
    differ = sorted(name for name in want.keys() | got.keys() if want.get(name) != got.get(name))
    return [Mismatch(SECRETS_FILE, f"secret {name} differs as read back") for name in differ]


def read_secrets(transport: Transport, release_dir: str) -> bytes | None:
    """A release's secrets file, read without recording its bytes; its values are
    masked from then on. None when the release has none."""
    with no_log():
        raw = store.read_back(transport, release_dir, [SECRETS_FILE]).get(SECRETS_FILE)
    if raw is not None:
        register(parse_exports(raw).values())
    return raw


def release_key(transport: Transport, release_dir: str) -> ProbeKey | None:
    """The API key a release's server requires (see secrets.probe_key), from its files."""
    launch = store.read_back(transport, release_dir, [LAUNCH_SCRIPT]).get(LAUNCH_SCRIPT, b"")
    return probe_key(launch, read_secrets(transport, release_dir))


def changes_from(transport: Transport, plan: TargetPlan, current: str | None) -> str:
    """The new release's files against the current release's on the target (its
    rendered files and the secrets its manifest recorded), as a diff."""
    current_dir = plan.layout.release(current) if current else None
    names = [*RENDERED, MANIFEST]
    old = store.read_back(transport, current_dir, names) if current_dir else {}
    applied = Applied.parse(old.pop(MANIFEST, None))
    return changes(
        plan.container,
        current_dir,
        old,
        plan.release_dir,
        plan.files,
        (applied.secrets if applied else {}, plan.secrets),
    )
