"""Findings: what a check found wrong with a model file, in the field's own terms.

A finding names the field (a dotted path such as "dflash_config.target_layer_ids"),
what was expected and what is there, and a one-line hint that says what goes wrong
at run time and what to do about it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    """How bad a finding is: errors stop a deploy, warnings are shown."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One problem found in a model file or between two of them."""

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

    def to_dict(self) -> dict[str, object]:
        """The finding as JSON-able data (expected/actual are parsed JSON values)."""
        return {
            "severity": self.severity.value,
            "field": self.field,
            "expected": self.expected,
            "actual": self.actual,
            "message": self.message,
        }
