"""Pydantic base for the YAML schemas, and errors that point at file:line:col."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import InputError
from orchestrator.yamlsource import YamlDocument, dotted

ModelT = TypeVar("ModelT", bound=BaseModel)

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")]
Port = Annotated[int, Field(ge=1, le=65535)]


class Schema(BaseModel):
    """Every schema refuses unknown keys, infinite and NaN numbers, and is immutable
    once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def validate_document(model: type[ModelT], document: YamlDocument) -> ModelT:
    """Validate parsed YAML; every problem is one line `file:line:col: field: what`."""
    if not isinstance(document.data, dict):
        raise InputError(f"{document.source}:1:1: expected a mapping at the top level")
    try:
        return model.model_validate(document.data)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, document)) from None


def format_validation_error(exc: ValidationError, document: YamlDocument) -> str:
    errors = sorted(exc.errors(include_url=False), key=lambda e: document.position(e["loc"]))
    return "\n".join(
        f"{document.where(e['loc'])}: {dotted(e['loc']) or '(top level)'}: {_message(e)}"
        for e in errors
    )


def _message(error: Any) -> str:
    kind, message = error["type"], error["msg"]
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    return f"{message} (got {error['input']!r})"
