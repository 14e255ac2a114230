"""`orch verify-config PLAYBOOK`: each container's current release against its own
manifest (hand edits), against a fresh render of the playbook (release.drift), and by
the drafter checks on the files as they are there; `orch verify-config --drafter
--target`: the drafter checks on local files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from orchestrator import preflight, release, release_check
from orchestrator.connections import SSH, Connect
from orchestrator.container import store
from orchestrator.container.journal import Journal
from orchestrator.contract import run_result
from orchestrator.documents.fleet import (
    NothingToVerify,
    Unreached,
    Verified,
    Verify,
)
from orchestrator.documents.local import Findings
from orchestrator.drafters.findings import Finding, Severity
from orchestrator.drafters.modelfiles import parse_json_document
from orchestrator.fleet.inputs import Inputs
from orchestrator.fleet.read import fleet_read, unreachable
from orchestrator.layout import DRAFTER_CONFIG, LAUNCH_SCRIPT, SECRETS_FILE, VIEW_CONFIG
from orchestrator.plan import TargetPlan
from orchestrator.playbook import Playbook
from orchestrator.secrets import digest, parse_exports
from orchestrator.serving import server_check
from orchestrator.serving.judge import Launch
from orchestrator.transaction import releases as release_files
from orchestrator.transport.base import Transport
from orchestrator.verify import verify_local


def verify_files(
    drafter: Path | None,
    target: Path,
    tokenizer: Path | None,
    profile: str | None,
    num_speculative_tokens: int | None,
    server_version: str | None,
    launch: Launch | None,
) -> tuple[Findings, int]:
    """The drafter checks on local model files (`verify.verify_local`), against vLLM
    `server_version` when given: exit 1 when any is an error."""
    findings, judged = verify_local(
        drafter, target, tokenizer, profile, num_speculative_tokens, server_version, launch
    )
    checked = Findings.of(findings, judged)
    return checked, 1 if checked.result == "not_applied" else 0


def verify_remote(
    inputs: Inputs, connect: Connect = SSH, recheck: bool = False
) -> tuple[Verify, int]:
    """Each container's current release against its own manifest (a hand edit:
    `changed_on_target`, exit 1), then the manifest against a fresh render of the
    playbook as it is now (`playbook_differs`: informational), plus the drafter
    checks on the files as they are on the container and the server check of its
    launch (its kept passing verdict reused, as a deploy reuses it, unless `recheck`)."""

    def one(transport: Transport, plan: TargetPlan) -> tuple[Verified | NothingToVerify, int]:
        entry, code = _verify_one(transport, plan, inputs.playbook, recheck)
        if isinstance(entry, Verified) and entry.playbook_differs:
            entry.apply_with = inputs.deploy_command(plan.container)
        return entry, code

    read = fleet_read(inputs, connect, one)
    codes = [code for _, code in read.group.succeeded.values()]
    code = max([*codes, *(e.exit_code for e in read.group.failed.values())], default=0)
    targets: list[Verified | NothingToVerify | Unreached] = read.entries(
        lambda _, verified: verified[0], unreachable
    )
    document = Verify(playbook=inputs.playbook.name, result=run_result(code), targets=targets)
    return document, code


VERIFIED_NAMES = [release.MANIFEST, DRAFTER_CONFIG, LAUNCH_SCRIPT, VIEW_CONFIG]


def _verify_one(
    transport: Transport, plan: TargetPlan, playbook: Playbook, recheck: bool
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
    found = release.drift(plan, current, applied, actual)
    changed = list(found.changed)
    if applied is not None:
        on_target = release_files.read_secrets(transport, plan.layout.release(current))
        changed += _secrets_changed(plan, applied, on_target)
    facts = release_check.read(
        transport, plan, current, actual.get(LAUNCH_SCRIPT), actual.get(DRAFTER_CONFIG), recheck
    )
    findings = _remote_findings(
        plan, playbook, actual.get(DRAFTER_CONFIG), facts.target, facts.drafter
    )
    checked = release_check.check(transport, plan, facts) if facts.launch.executable else None
    findings += server_check.findings(checked, facts.launch) if checked else []
    bad = changed or any(f.severity == Severity.ERROR for f in findings)
    verified = Verified(
        name=plan.container,
        host=plan.host,
        interrupted=interrupted,
        release=current,
        applied=applied,
        changed_on_target=changed,
        playbook_differs=found.playbook_differs,
        findings=findings,
        result="drift" if bad else "ok",
        server_check_reused=checked.reused if checked and checked.reused else None,
    )
    return verified, 3 if journal else (1 if bad else 0)


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
    plan: TargetPlan,
    playbook: Playbook,
    config: bytes | None,
    target: preflight.ModelDir,
    drafter: preflight.ModelDir | None,
) -> list[Finding]:
    """The drafter checks on the config as deployed, against the target as it is there."""
    if DRAFTER_CONFIG in plan.files:
        if config is None:
            return []  # reported as drift
        parsed, findings = parse_json_document(config, f"{plan.drafter_view}/{DRAFTER_CONFIG}")
        if parsed is None:
            return findings
        plan = dataclasses.replace(plan, drafter_config=parsed)
    return preflight.drafter_findings(
        target,
        drafter,
        plan,
        playbook.server.num_speculative_tokens,
    )
