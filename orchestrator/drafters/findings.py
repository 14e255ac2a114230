"""Findings: what a check found wrong with a model file, in the field's own terms.

A finding names the field (a dotted path such as "dflash_config.target_layer_ids"),
what was expected and what is there, and a one-line hint that says what goes wrong
at run time and what to do about it.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

import pydantic


class Severity(StrEnum):
    """How bad a finding is: errors stop a deploy, warnings are shown."""

    ERROR = "error"
    WARNING = "warning"


@pydantic.dataclasses.dataclass(frozen=True)
class Finding:
    """One problem found in a model file or between two of them; `expected` and
    `actual` are parsed JSON values, so the finding is JSON as it stands."""

    severity: Severity
    field: str
    expected: object
    actual: object
    message: str

    @classmethod
    def error(
        cls, field: str, message: str, *, expected: object = None, actual: object = None
    ) -> Finding:
        return cls(Severity.ERROR, field, expected, actual, message)

    @classmethod
    def warning(
        cls, field: str, message: str, *, expected: object = None, actual: object = None
    ) -> Finding:
        return cls(Severity.WARNING, field, expected, actual, message)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == Severity.ERROR for f in findings)


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, each severity in the order found."""
    return sorted(findings, key=lambda f: f.severity != Severity.ERROR)
