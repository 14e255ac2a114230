"""The one JSON contract every `--json` prints (docs/json.md).

Each document is an object with `kind` and `api_version` first (`contract.Document`);
documents about containers list them under `targets`, each with `name`. Result words
come from the vocabularies in `contract`, so a program can match on them across
commands.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.contract import Document, RunResult, TargetResult, TargetState


class TargetEntry(BaseModel):
    """What every entry under `targets` has; commands add their own fields."""

    model_config = ConfigDict(extra="allow")
    name: str
    result: TargetResult | None = None
    state: TargetState | None = None
    host: str | None = None
    release: str | None = None
    health: int | None = None
    error: str | None = None


class AnyDocument(Document):
    """Any command's output, as a schema: the envelope and the fields that mean the same
    in every kind (docs/json.md). Tests validate every command's output against it."""

    model_config = ConfigDict(extra="allow")
    result: RunResult
    """Every kind has it: the same fact as the exit code (`contract.run_result`)."""
    state: TargetState | None = None
    targets: list[TargetEntry] | None = None


class ErrorLine(BaseModel):
    """One line of an error, with where it points (None where the line does not say):
    `inventory.yaml:12:5: containers.ct200.vmid: ...`."""

    file: str | None
    line: int | None
    column: int | None
    field: str | None
    message: str


class Error(Document):
    """The one document a `--json` command prints when it stops before its own."""

    kind: Literal["Error"] = "Error"
    result: RunResult
    message: str
    errors: list[ErrorLine]
