"""The documents of the commands that work on this machine only, from the playbook,
the profiles and local model files: verify-config on files, profiles, render,
explain, alerts and completion."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel

from orchestrator.contract import Document, OnlyWhenSet, RunResult
from orchestrator.drafters.findings import Finding, has_errors, sorted_findings
from orchestrator.drafters.kinds import get_kind
from orchestrator.explain import Entry, described
from orchestrator.verify import Judged

if TYPE_CHECKING:
    from orchestrator.drafters.profiles import Profile
    from orchestrator.plan import TargetPlan


class Findings(Document):
    """`orch verify-config --drafter ... --target ...`: the checks of local model files,
    errors first, after the kind they were judged as (when a drafter config was read)."""

    kind: Literal["Findings"] = "Findings"
    result: RunResult
    judged_as: Judged | None
    findings: list[Finding]

    @classmethod
    def of(cls, findings: list[Finding], judged: Judged | None) -> Findings:
        return cls(
            result="not_applied" if has_errors(findings) else "ok",
            judged_as=judged,
            findings=sorted_findings(findings),
        )


class Profiles(Document):
    kind: Literal["Profiles"] = "Profiles"
    result: RunResult = "ok"
    profiles: list[dict[str, Any]]
    """Each profile's name, kind and target, the fields its kind tells profiles apart
    by, then its notes: which fields stand between is each drafter kind's own."""

    @classmethod
    def of(cls, profiles: Iterable[Profile]) -> Profiles:
        return cls(
            profiles=[
                {
                    "name": p.name,
                    "kind": p.kind,
                    "target": p.target_name,
                    **get_kind(p.kind).describe(p),
                    "notes": list(p.notes),
                }
                for p in profiles
            ]
        )


class RenderedTarget(BaseModel):
    """One container's files as a deploy would write them, and the drafter checks."""

    name: str
    host: str
    release: str
    result: Literal["ok", "error"]
    release_dir: str
    files: dict[str, str]
    """Each file's text, by name."""
    findings: list[Finding]
    written: Annotated[list[str] | None, OnlyWhenSet] = None
    """With --output: the local files they went to."""


class Render(Document):
    kind: Literal["Render"] = "Render"
    playbook: str
    result: RunResult
    targets: list[RenderedTarget]

    @classmethod
    def of(
        cls, playbook: str, plans: Iterable[TargetPlan], written: dict[str, list[str]] | None
    ) -> Render:
        """Each container's files as a deploy would write them (and, with --output, the
        local files they went to)."""
        targets = [
            RenderedTarget(
                name=plan.container,
                host=plan.host,
                release=plan.release_id,
                result="error" if has_errors(plan.findings) else "ok",
                release_dir=plan.release_dir,
                files={name: data.decode() for name, data in plan.files.items()},
                findings=sorted_findings(plan.findings),
                written=written[plan.container] if written is not None else None,
            )
            for plan in plans
        ]
        failed = any(t.result == "error" for t in targets)
        return cls(playbook=playbook, result="not_applied" if failed else "ok", targets=targets)


class Explain(Document):
    kind: Literal["Explain"] = "Explain"
    result: RunResult = "ok"
    path: str | None
    field: Entry | None
    """The field asked for; None for a schema's root."""
    fields: list[Entry]
    """The fields inside it: a section's, or the roots' top-level fields."""

    @classmethod
    def of(cls, path: str | None) -> Explain:
        """The field `path` names, and the fields inside it."""
        field, inside = described(path)
        return cls(path=path, field=field, fields=inside)


class Alerts(Document):
    kind: Literal["Alerts"] = "Alerts"
    result: RunResult = "ok"
    playbook: str
    format: str
    groups: list[dict[str, Any]]
    """The rule groups as Prometheus reads them (a rules file's `groups`): their
    shape is Prometheus's."""

    @classmethod
    def of(cls, playbook: str, rules_format: str, rules: dict[str, Any]) -> Alerts:
        """The rule groups of `alerts.rule_groups`, for this playbook."""
        return cls(playbook=playbook, format=rules_format, groups=rules["groups"])


class Completion(Document):
    kind: Literal["Completion"] = "Completion"
    result: RunResult = "ok"
    shell: str
    script: str
