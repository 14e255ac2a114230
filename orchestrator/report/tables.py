"""The tables of the read-only commands: status, releases, verify-config, history,
unlock, doctor, profiles, findings, render and the lab's status."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.text import Text

from orchestrator.documents.fleet import (
    AuditSummary,
    Decide,
    Deploying,
    Doctor,
    ForeignLock,
    LockHolder,
    NothingPaused,
    NothingToVerify,
    Releases,
    Status,
    StatusTarget,
    Unlock,
    Unreached,
    UnreachedStatus,
    Verified,
    Verify,
)
from orchestrator.documents.history import RecordedRun, RecordedTarget
from orchestrator.documents.lab import LabStatus
from orchestrator.documents.local import Findings, Profiles
from orchestrator.drafters.findings import Severity
from orchestrator.durations import ago
from orchestrator.probes.sampling import describe
from orchestrator.report.run import attempted
from orchestrator.report.screen import (
    Cell,
    Column,
    console,
    findings_table,
    fitted_table,
    heading,
    mean_length,
    printable,
    text,
    words,
    write_plain,
)

if TYPE_CHECKING:
    from orchestrator.documents.history import History
    from orchestrator.plan import TargetPlan


def print_findings(doc: Findings) -> None:
    """Offline findings, after the kind they were judged as (when a drafter config was read)."""
    out = console()
    if doc.judged_as:
        out.print(Text(doc.judged_as.line()))
    if doc.findings:
        out.print(findings_table(out, doc.findings), crop=False)
    errors = sum(f.severity == Severity.ERROR for f in doc.findings)
    out.print(f"{errors} error(s), {len(doc.findings) - errors} warning(s)")


def print_profiles(doc: Profiles) -> None:
    rows = []
    for entry in doc.profiles:
        fields = {k: v for k, v in list(entry.items())[3:] if k != "notes"}
        details = "; ".join(
            f"{key} {value if isinstance(value, str) else json.dumps(value)}"
            for key, value in fields.items()
        )
        rows.append(
            [text(entry["name"]), text(entry["kind"]), text(entry["target"]), text(details)]
        )
    out = console()
    columns = [
        Column("PROFILE", identifier=True),
        Column("KIND"),
        Column("TARGET", drop=2),
        Column("DETAILS", fold=True),
    ]
    out.print(fitted_table(out, columns, rows), crop=False)
    for entry in doc.profiles:
        for note in entry["notes"]:
            out.print(text(f"note: {entry['name']}: {note}"))


def print_plans(plans: Iterable[TargetPlan], written: dict[str, list[str]] | None = None) -> None:
    """Each container's files as plain text under `==> container:path <==` headers (whole
    lines, never wrapped), or with `written` the local files they went to; then the checks."""
    out = console()
    for plan in plans:
        write_plain(f"# {plan.container} on {plan.host}: release {plan.release_id}")
        if written is not None:
            for path in written[plan.container]:
                write_plain(f"wrote {path}")
        else:
            for name, data in plan.files.items():
                write_plain(f"==> {plan.container}:{plan.release_dir}/{name} <==\n")
                write_plain(data.decode("utf-8", "replace"))
        if plan.findings:
            out.print(
                findings_table(out, plan.findings, title="drafter checks against the profile"),
                crop=False,
            )
        else:
            out.print("drafter checks: no findings")


def print_lab_status(doc: LabStatus) -> None:
    """`orch lab status`: one row per container of the lab."""
    rows = [
        [
            text(t.name),
            text(str(t.vmid)),
            text(t.host),
            text(t.access),
            text(t.ssh),
            text("up" if t.sshd_up else "down"),
            text(t.status),
            text(", ".join(f"pid {pid}" for pid in t.servers)),
        ]
        for t in doc.targets
    ]
    columns = [
        Column("CONTAINER", identifier=True),
        Column("VMID", drop=3),
        Column("HOST", drop=4),
        Column("ACCESS", drop=2),
        Column("SSH", drop=5),
        Column("SSHD", drop=1),
        Column("STATUS"),
        Column("SERVERS"),
    ]
    out = console()
    kind = "the real vLLM" if doc.server == "vllm" else "the vLLM stand-in"
    out.print(text(f"server: {kind} {doc.vllm_version}"), crop=False)
    out.print(fitted_table(out, columns, rows), crop=False)


def print_verify(doc: Verify, deploy_with: str | None = None) -> None:
    """Per container: hand edits first (they fail the check), then what the playbook
    would change now (information, with the deploy that applies it)."""
    out = console()
    for target in doc.targets:
        release_id = None if isinstance(target, Unreached) else target.release
        on = f": release {release_id}" if release_id else ""
        heading(out, text(f"{target.name} on {target.host}{on}"))
        if isinstance(target, Unreached):
            out.print(text(target.error, "red"), highlight=False)
        elif isinstance(target, NothingToVerify):
            out.print(text(f"nothing deployed yet: {deploy_with or _deploy(doc)}"))
        else:
            for change in target.changed_on_target:  # whole lines, as diff prints them
                out.print(text(change, "red"), highlight=False)
            for change in target.playbook_differs:
                out.print(text(change, "yellow"), highlight=False)
            if target.apply_with:
                out.print(text(f"apply it with: {target.apply_with}"))
            if target.server_check_reused:
                out.print(
                    text(
                        "the server check reused its passing verdict on this launch from "
                        f"{target.server_check_reused} (--recheck checks again)"
                    ),
                    highlight=False,
                )
            if target.findings:
                out.print(findings_table(out, target.findings), crop=False)
    for line in verify_summary(doc):
        out.print(text(line, "" if doc.result == "ok" else "red"), highlight=False)


def verify_summary(doc: Verify) -> list[str]:
    """What verify-config found, in words: per container that drifted, what (hand edits
    since the run that applied its release, drafter checks its files fail, or what
    stopped the check); `no drift` when there is none."""
    lines = []
    for target in doc.targets:
        if isinstance(target, Unreached):
            lines.append(f"{target.name}: not checked: {target.error}")
            continue
        parts = []
        if isinstance(target, Verified):
            if target.changed_on_target:
                parts.append(
                    f"its release was changed on the container since run "
                    f"{target.applied.run_id} applied it"
                    if target.applied
                    else "its release differs from a fresh render (no readable manifest)"
                )
            errors = sum(f.severity == Severity.ERROR for f in target.findings)
            if errors:
                parts.append(f"its files fail {errors} drafter check(s)")
        if parts:
            lines.append(f"{target.name}: drift: {'; '.join(parts)}")
        if target.interrupted:
            lines.append(f"{target.name}: a run was interrupted there: {target.interrupted}")
    if doc.result == "ok":
        return ["no drift: each container holds what its run applied"]
    return lines or [f"not ok: {words(doc.result)}"]


RELEASES_COLUMNS = [
    Column("RUN", identifier=True),
    Column("ACTION", drop=3),
    Column("CONTAINER", identifier=True),
    Column("RESULT", drop=2),
    Column("LEFT ON", identifier=True),
    Column("NOW", drop=4),
    Column("USER", drop=5),
    Column("WHEN", drop=6),
]


KEPT_COLUMNS = [
    Column("CONTAINER", identifier=True),
    Column("RELEASE", identifier=True),
    Column("NOW", drop=1),
    Column("WRITTEN BY RUN", identifier=True, drop=2),
    Column("CREATED", drop=3),
]


def print_releases(doc: Releases) -> None:
    """One row per run and container, newest run first; then the releases kept on a
    container that no listed run names. Ids are never cut (they are typed back): on a
    narrow terminal the other columns go, WHEN and USER first. In a pipe every row
    carries its run's fields."""
    out = console()
    rows: list[list[Cell]] = []
    for run in doc.runs:
        for i, left in enumerate(run.targets):
            first = i == 0 or not out.is_terminal  # a pipe: every line a whole record
            rows.append(
                [
                    text(run.run_id if first else ""),
                    text(run.action if first else ""),
                    text(left.name),
                    text(words(left.result or "")),
                    text(left.release or "-"),
                    text(left.release_state),
                    text(run.user if first else ""),
                    text(run.time if first else ""),
                ]
            )
    out.print(text(f"{doc.playbook}: runs as the containers record them"), highlight=False)
    out.print(fitted_table(out, RELEASES_COLUMNS, rows), crop=False)
    unnamed: list[list[Cell]] = []
    for target in doc.targets:
        if isinstance(target, Unreached):
            out.print(text(f"{target.name}: {target.error}", "red"), highlight=False)
            continue
        unnamed += [
            [
                text(target.name),
                text(kept.release),
                text("current" if kept.current else "kept"),
                text(kept.made_by_run or "unknown"),
                text(kept.created or "unknown"),
            ]
            for kept in target.kept
            if not kept.named_by_a_run
        ]
    if unnamed:
        out.print(text("kept on the containers, left current by no listed run"))
        out.print(fitted_table(out, KEPT_COLUMNS, unnamed), crop=False)
    if not doc.runs and not unnamed:
        out.print("no runs recorded on these containers: nothing deployed yet", highlight=False)


def _position1(gate: dict[str, Any]) -> str:
    """Position-1 acceptance of a recorded gate, comparable across methods."""
    positions = gate.get("per_position_acceptance") or []
    return f"{positions[0]:.2f}" if positions else "-"


def _sampling(gate: dict[str, Any]) -> str:
    """What a recorded gate's probes sampled at (empty: no gate, or before orch recorded it)."""
    sampling = gate.get("sampling")
    return describe(sampling) if sampling else ""


HISTORY_COLUMNS = [
    Column("RUN", identifier=True),
    Column("CONTAINER", identifier=True),
    Column("RESULT"),
    Column("RELEASE", identifier=True),
    Column("ATTEMPTED", identifier=True),
    Column("MEAN LENGTH", drop=2, justify="right"),
    Column("POS-1", drop=6, justify="right"),
    Column("SAMPLING", drop=11),
    Column("PREVIOUS", identifier=True, drop=5),
    Column("STARTED", drop=3),
    Column("COMMAND", drop=1),
    Column("PLAYBOOK", identifier=True, drop=4),
    Column("USER", drop=7),
    Column("MODEL", drop=9),
    Column("METHOD", drop=8),
    Column("DRAFTER", drop=10),
]


def _whole_run(run: RecordedRun) -> RecordedTarget:
    """The row of a run recorded without targets of its own (a tune: its depths are
    deploys of their own): its container and result."""
    return RecordedTarget(name=str((run.model_extra or {}).get("target") or ""), result=run.result)


def print_history(doc: History, filters: list[str]) -> None:
    """One row per run and container; on a terminal a run's own fields on its first
    row only, in a pipe on every row (`orch history | grep ct200` keeps the run id).
    RELEASE is where the container ended, ATTEMPTED the release tried when it is not
    there, as in a run's own table. `filters`: the options that chose the runs
    (`--playbook nope`), named when no run matched them."""
    out = console()
    rows: list[list[Cell]] = []
    for run in doc.runs:
        first = True
        for target in run.targets or [_whole_run(run)]:
            own = [
                text(fact or "") if first else Text("")
                for fact in (
                    run.started,
                    run.command,
                    run.playbook,
                    run.user,
                    run.model,
                    run.method,
                    run.drafter,
                )
            ]
            gate = target.gate or {}
            rows.append(
                [
                    text(run.run_id) if first else Text(""),
                    text(target.name),
                    text(words(target.result)),
                    text(target.ended_on or ""),
                    text(attempted(target.release, target.ended_on, target.result) or ""),
                    mean_length(gate.get("mean_acceptance_length")),
                    _position1(gate),
                    _sampling(gate),
                    text(target.previous_release or ""),
                    *own,
                ]
            )
            first = not out.is_terminal  # a pipe: every line a whole record, for grep
    if not rows:
        out.print(
            text(
                f"no recorded run matches {' '.join(filters)}"
                if filters
                else "no runs recorded yet"
            )
        )
        return
    out.print(fitted_table(out, HISTORY_COLUMNS, rows), crop=False)


STATUS_COLUMNS = [
    Column("CONTAINER", identifier=True),
    Column("STATE"),
    Column("RELEASE", identifier=True),
    Column("SERVER", drop=3),
    Column("HEALTH", drop=4),
    Column("GATE", drop=5),
    Column("MEAN LENGTH", drop=2, justify="right"),
    Column("LAST RUN", drop=7, fold=True),
    Column("LOCKED BY", drop=1, fold=True),
    Column("HOST", drop=6),
]


def last_run_words(last: AuditSummary) -> str:
    """`deploy rolled back 536fae0d5d06 3m ago`: what the last run did, and to which
    release, apart from where the container stands."""
    if not last:
        return ""
    release = f" {last['release']}" if last.get("release") else ""
    return f"{last['action']} {words(last['result'] or '')}{release} {ago(last['time'])}"


def deploying_words(run: Deploying) -> str:
    """`run R by root@vm, at 'gate', 12 s`: the run at work on a container."""
    step = f", at '{run.step}'" if run.step else ""
    since = f" since {run.paused_since}" if run.paused_since else ""
    return f"run {run.run_id} by {run.owner}{step}{since}, {run.elapsed:.0f} s"


def server_words(target: StatusTarget) -> str:
    """`running pid 1234`, `exited pid 1234` (its process gone, orch did not stop it),
    `stopped` (by `orch stop`, which removes the PID record), or `not started`."""
    if target.server == "running":
        return f"running pid {target.pid}"
    if target.server == "stopped":
        return f"exited pid {target.pid}"
    if target.state == "stopped":
        return "stopped"
    return "not started" if target.server == "none" else ""


def locked_by(lock: LockHolder) -> str:
    """`root@host 3m ago` for a lock orch wrote, its text for one it did not."""
    if lock is None:
        return ""
    if isinstance(lock, ForeignLock):
        return lock.text
    return f"{lock.user}@{lock.control_host} {ago(lock.since)}"


def _deploy(doc: Status | Verify) -> str:
    """The deploy command when the inventory's path is not known here."""
    return f"orch deploy {doc.playbook} -i INVENTORY"


def _status_row(t: StatusTarget | UnreachedStatus) -> list[Cell]:
    if isinstance(t, UnreachedStatus):
        return [text(t.name), text(words(t.state)), *[text("")] * 7, text(t.host)]
    gate = t.release_gate or {}
    never_gated = "not gated" if t.release and not gate else ""
    return [
        text(t.name),
        text(words(t.state)),
        text(t.release or ""),
        text(server_words(t)),
        text("" if t.health is None else ("ok" if t.health == 200 else f"{t.health}")),
        text(
            f"{gate.get('result')} (promoted)"
            if gate.get("promoted")
            else gate.get("result") or never_gated
        ),
        mean_length(gate.get("mean_acceptance_length")),
        text(last_run_words(t.last_run)),
        text(locked_by(t.lock)),
        text(t.host),
    ]


def _status_notes(t: StatusTarget | UnreachedStatus) -> list[tuple[str, str]]:
    """What a container's row cannot hold: a run at work there (plain), a run
    interrupted there and what went wrong (red)."""
    if isinstance(t, UnreachedStatus):
        return [(f"{t.name}: error: {t.error}", "red")]
    run = t.deploying
    notes = [(f"{t.name}: {words(t.state)}: {deploying_words(run)}", "")] if run else []
    if run and run.decide:
        notes += [(f"{t.name}: {c}: {command}", "") for c, command in run.decide.items()]
    notes += [(f"{t.name}: interrupted: {t.interrupted}", "red")] if t.interrupted else []
    if t.state == "crashed":
        ends = f"; its log ends: {t.log_end}" if t.log_end else ""
        notes.append((f"{t.name}: crashed: the server exited, not stopped by orch{ends}", "red"))
    return notes + ([(f"{t.name}: error: {t.error}", "red")] if t.error else [])


def print_status(doc: Status, deploy_with: str | None = None) -> None:
    """`deploy_with`: the deploy command with the real inventory, for the hint."""
    out = console()
    rows = [_status_row(t) for t in doc.targets]
    out.print(fitted_table(out, STATUS_COLUMNS, rows), crop=False)
    for t in doc.targets:
        for note, style in _status_notes(t):
            out.print(text(note, style), highlight=False)
    if doc.state == "nothing_deployed":
        out.print(text(f"nothing deployed yet: {deploy_with or _deploy(doc)}"))


def print_unlock(doc: Unlock) -> None:
    for t in doc.targets:
        if isinstance(t, Unreached):
            line = f"error: {t.error}"
        elif t.removed_lock:
            lock = t.removed_lock
            who = (
                lock.text
                if isinstance(lock, ForeignLock)
                else f"run {lock.run_id} of {locked_by(lock)}"
            )
            line = f"removed the lock held by {who}"
        else:
            line = "no lock"
        print(printable(f"{t.name}: {line}"))


def print_decide(doc: Decide) -> None:
    """`orch promote|abort|retry`: per container, the run decided for, or why not."""
    for t in doc.targets:
        if isinstance(t, Unreached):
            line = f"error: {t.error}"
        elif isinstance(t, NothingPaused):
            line = f"skipped: {t.note}"
        else:
            line = (
                f"{doc.decision} of {t.release} written for paused run {t.run_id}: it acts "
                "on it at its next poll"
            )
        print(printable(f"{t.name}: {line}"))


def print_doctor(doc: Doctor) -> None:
    """`orch doctor`: one line per check (`fix:` under each failure)."""
    checks = [check for target in doc.targets for check in target.checks]
    target_width = max((len(c.target) for c in checks), default=0)
    check_width = max((len(c.check) for c in checks), default=0)
    for c in checks:  # plain lines: one per check, never wrapped, for grep and logs
        status = c.status.upper() if c.status == "fail" else c.status
        print(
            printable(
                f"{c.target:<{target_width}}  {c.check:<{check_width}}  {status:<4}  " + c.detail
            )
        )
        if c.status == "fail" and c.fix:
            print(printable(" " * (target_width + check_width + 10) + f"fix: {c.fix}"))
    failed = sum(c.status == "fail" for c in checks)
    print(f"{failed} check(s) failed" if failed else "ready to deploy")
