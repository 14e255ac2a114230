"""What a release is: its manifest, what the manifest says was applied, the comparison
of its files (cat-verify's, by SHA-256 and the drafter's key fields) and their diffs.
Pure but for `write_local` (`orch render --out`); the transaction writes and reads a
release on the target (orchestrator/transaction/releases.py) through the container's
release store (orchestrator/container/store.py).

A release is `releases/<id>/` holding the rendered drafter config, the launch
script, a manifest, and `drafter/` (links to the downloaded weights plus the
release's own config.json). The downloaded model dirs are never modified.
"""

from __future__ import annotations

import difflib
import getpass
import hashlib
import json
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import pydantic
from pydantic import Field

from orchestrator import remotejson
from orchestrator.contract import jsonable
from orchestrator.drafters.findings import Finding
from orchestrator.errors import InputError
from orchestrator.layout import DRAFTER_CONFIG, LAUNCH_SCRIPT, SECRETS_FILE, VIEW_CONFIG
from orchestrator.plan import TargetPlan
from orchestrator.playbook import Gate, Playbook

MANIFEST = "manifest.json"
RENDERED = (DRAFTER_CONFIG, LAUNCH_SCRIPT)  # the files a release may hold that --diff shows
MODES = {LAUNCH_SCRIPT: "0755", SECRETS_FILE: "0600"}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pydantic.dataclasses.dataclass(frozen=True)
class GateTarget:
    """What a release's gate needs, recorded in its manifest: a rollback re-gates the
    release it goes back to with its own served name, port and gate settings."""

    served_name: str
    port: int
    gate: Gate

    @classmethod
    def of(cls, playbook: Playbook) -> GateTarget:
        return cls(playbook.target.served_name, playbook.server.port, playbook.gate)


def manifest(
    plan: TargetPlan, playbook: Playbook, run_id: str, forced: list[Finding], gate: GateTarget
) -> bytes:
    """What the release is and what was applied to make it: the playbook file (path and
    SHA-256 of its text), the `--set` assignments, and each rendered file's SHA-256, so
    that verify-config tells a hand edit on the target from a change of the playbook."""
    document = {
        "playbook": plan.playbook,
        "playbook_path": playbook.source,
        "playbook_sha256": playbook.source_sha256,
        "assignments": list(playbook.assignments),
        "release_id": plan.release_id,
        "container": plan.container,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "run_id": run_id,
        "user": getpass.getuser(),
        "control_host": socket.gethostname(),
        "profile": plan.profile.name if plan.profile else None,
        "target": plan.target_dir,
        "drafter_weights": plan.drafter_weights,
        "files": {name: sha256(data) for name, data in plan.files.items()},
        "secrets": plan.secrets,
        "forced_findings": jsonable(forced),
        "gate_target": jsonable(gate),
    }
    return (json.dumps(document, indent=2) + "\n").encode()


def write_local(plan: TargetPlan, directory: Path) -> list[Path]:
    """The release's files as a deploy writes them (same bytes, same modes), in
    `directory/<container>/`, for review or a pipeline's artefacts."""
    target = directory / plan.container
    written = []
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name, data in plan.files.items():
            path = target / name
            path.write_bytes(data)
            path.chmod(int(MODES.get(name, "0644"), 8))
            written.append(path)
    except OSError as exc:
        raise InputError(f"{exc.filename}: cannot write: {exc.strerror}") from exc
    return written


@pydantic.dataclasses.dataclass(frozen=True)
class Applied:
    """What the manifest of a release says was applied to make it."""

    run_id: str
    files: Annotated[dict[str, str], Field(exclude=True)]
    """Each rendered file's SHA-256; the drafter view's config.json is config.json's."""
    playbook_path: str | None
    playbook_sha256: str | None
    assignments: list[str]
    secrets: dict[str, str]
    """Each secret's digest (secrets.digest), by name."""

    @classmethod
    def parse(cls, raw: bytes | None) -> Applied | None:
        """None for a missing or unreadable manifest."""
        try:
            manifest = remotejson.loads(raw or b"null")
            files = {str(name): str(digest) for name, digest in manifest["files"].items()}
            assignments = [str(a) for a in manifest.get("assignments") or []]
            run_id = str(manifest["run_id"])
            secrets = {str(n): str(d) for n, d in (manifest.get("secrets") or {}).items()}
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        if DRAFTER_CONFIG in files:
            files[VIEW_CONFIG] = files[DRAFTER_CONFIG]
        path, digest = manifest.get("playbook_path"), manifest.get("playbook_sha256")
        return cls(
            run_id,
            files,
            path if isinstance(path, str) else None,
            digest if isinstance(digest, str) else None,
            assignments,
            secrets,
        )


@dataclass(frozen=True)
class Mismatch:
    name: str
    reason: str
    diff: str = ""

    def __str__(self) -> str:
        return f"{self.name}: {self.reason}" + (f"\n{self.diff}" if self.diff else "")


def compare(
    expected: Mapping[str, bytes], actual: Mapping[str, bytes], key_fields: Sequence[str]
) -> list[Mismatch]:
    """SHA-256 of every file, then parse and re-check the drafter's key fields."""
    hashes = {name: sha256(data) for name, data in expected.items()}
    return compare_hashes(hashes, expected, actual, key_fields, "rendered")


def compare_hashes(
    expected: Mapping[str, str],
    known: Mapping[str, bytes],
    actual: Mapping[str, bytes],
    key_fields: Sequence[str],
    label: str,
) -> list[Mismatch]:
    """Each file's SHA-256 against `expected`; where the expected bytes are `known`
    (they hash to `expected`), with a diff and the drafter's key fields re-checked.
    `label` names the expected side in the messages ("rendered", "applied by run R")."""
    mismatches = []
    for name, digest in expected.items():
        if name not in actual:
            mismatches.append(Mismatch(name, "missing on the target"))
        elif sha256(actual[name]) != digest:
            diff = (
                unified_diff(known[name], actual[name], f"{name} ({label})", f"{name} (on target)")
                if name in known
                else ""
            )
            reason = f"SHA-256 {sha256(actual[name])[:12]} != {label} {digest[:12]}"
            mismatches.append(Mismatch(name, reason, diff))
    for name in (DRAFTER_CONFIG, VIEW_CONFIG):
        if name in actual and name in known:
            mismatches += _key_field_mismatches(name, known[name], actual[name], key_fields, label)
    return mismatches


def _key_field_mismatches(
    name: str, expected: bytes, actual: bytes, key_fields: Sequence[str], label: str
) -> list[Mismatch]:
    try:
        got = remotejson.loads(actual)
    except ValueError as exc:
        return [Mismatch(name, f"not valid JSON as read back: {exc}")]
    if not isinstance(got, dict):
        return [Mismatch(name, "not a JSON object as read back")]
    want = json.loads(expected)
    return [
        Mismatch(name, f"{key}: {got.get(key)!r} != {label} {want.get(key)!r}")
        for key in key_fields
        if got.get(key) != want.get(key)
    ]


def unified_diff(old: bytes, new: bytes, old_label: str, new_label: str) -> str:
    """`diff -u old new` with these labels: whole lines, an absent side given as empty
    bytes and labelled /dev/null by the caller, and diff's marker for a last line
    without its newline."""

    def lines(data: bytes) -> list[str]:
        split = data.decode("utf-8", "replace").splitlines(keepends=True)
        if split and not split[-1].endswith("\n"):
            split[-1] += "\n\\ No newline at end of file\n"
        return split

    return "".join(difflib.unified_diff(lines(old), lines(new), old_label, new_label))


def changes(
    container: str,
    current_dir: str | None,
    current: Mapping[str, bytes],
    new_dir: str,
    new: Mapping[str, bytes],
    secrets: tuple[Mapping[str, str], Mapping[str, str]] = ({}, {}),
) -> str:
    """What a deploy changes, as `diff -u -N` per file: `---` the file of the current
    release on the target, `+++` the one the new release holds, each named
    `container:path`, and /dev/null for the side that lacks it. Unchanged files give
    nothing, as with diff. The secrets file is shown by name only, from the digests
    (`secrets`: current, new): `<secret NAME changed>`."""

    def label(directory: str | None, files: Mapping[str, bytes], name: str, which: str) -> str:
        return f"{container}:{directory}/{name} ({which})" if name in files else "/dev/null"

    files = "".join(
        unified_diff(
            current.get(name, b""),
            new.get(name, b""),
            label(current_dir, current, name, "current"),
            label(new_dir, new, name, "new"),
        )
        for name in dict.fromkeys([*new, *current])
    )
    was, now = secrets
    changed = secret_changes(was, now)
    if not changed:
        return files
    old = f"{container}:{current_dir}/{SECRETS_FILE} (current)" if was else "/dev/null"
    made = f"{container}:{new_dir}/{SECRETS_FILE} (new)" if now else "/dev/null"
    return files + f"--- {old}\n+++ {made}\n" + "".join(f"{line}\n" for line in changed)


def secret_changes(applied: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """`<secret NAME changed>` (added, removed) between two releases' digests."""
    lines = []
    for name in sorted(applied.keys() | now.keys()):
        if name not in applied:
            lines.append(f"<secret {name} added>")
        elif name not in now:
            lines.append(f"<secret {name} removed>")
        elif applied[name] != now[name]:
            lines.append(f"<secret {name} changed>")
    return lines


def applied_mismatches(
    plan: TargetPlan, applied: Applied, actual: Mapping[str, bytes]
) -> list[Mismatch]:
    """A release's files on the target against the hashes its manifest recorded; where
    the playbook still renders what the manifest recorded, each mismatch has its diff."""
    known = {n: d for n, d in plan.read_back_files.items() if sha256(d) == applied.files.get(n)}
    label = f"applied by run {applied.run_id}"
    return compare_hashes(applied.files, known, actual, plan.kind.key_fields, label)


@dataclass(frozen=True)
class Drift:
    """How a container's current release stands against its manifest and the playbook."""

    changed: list[str]
    """Changed on the target since the run that applied the release (a hand edit)."""
    playbook_differs: list[str]
    """What the playbook now renders differently from what that run applied."""


def drift(
    plan: TargetPlan, current: str, applied: Applied | None, actual: Mapping[str, bytes]
) -> Drift:
    """The current release's files (`actual`, read back) against its manifest and a fresh
    render. Without a readable manifest the files can only be compared with a fresh
    render, and that is said."""
    if applied is None:
        mismatches = compare(plan.read_back_files, actual, plan.kind.key_fields)
        said = "no readable manifest, compared with a fresh render"
        return Drift([f"{said}: {m}" for m in mismatches], [])
    since = f"run {applied.run_id}"
    changed = [
        f"changed on the target since {since}: {m}"
        for m in applied_mismatches(plan, applied, actual)
    ]
    if current == plan.release_id:
        return Drift(changed, [])
    differs = [
        _differs(name, plan, applied, actual.get(name))
        for name in sorted(set(plan.files) | (set(applied.files) - {VIEW_CONFIG}))
        if name not in plan.files or sha256(plan.files[name]) != applied.files.get(name)
    ]
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
    return Drift(changed, differs)


def _differs(name: str, plan: TargetPlan, applied: Applied, on_target: bytes | None) -> str:
    """One file the playbook now renders otherwise than the release's run applied it,
    with the diff when the target still holds what was applied."""
    since = f"run {applied.run_id}"
    digest = applied.files.get(name)
    was = on_target if on_target and sha256(on_target) == digest else None
    diff = (
        unified_diff(
            was, plan.files[name], f"{name} (applied by {since})", f"{name} (rendered now)"
        )
        if was is not None and name in plan.files
        else ""
    )
    what = "no longer rendered" if name not in plan.files else "renders differently"
    return f"{name}: the playbook now differs from what {since} applied ({what})" + (
        f"\n{diff}" if diff else ""
    )
