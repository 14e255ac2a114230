"""Pydantic base for the YAML schemas, and errors that point at file:line:col."""

from __future__ import annotations

import difflib
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import InputError
from orchestrator.yamlsource import YamlDocument, dotted

ModelT = TypeVar("ModelT", bound=BaseModel)

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")]
Port = Annotated[int, Field(ge=1, le=65535)]
# Every number has a range: a value outside it (infinite, NaN, negative, absurdly large)
# is refused when the document is loaded, before anything is rendered or written.
MAX_COUNT = 1_000_000
WEEK = 7 * 24 * 3600.0
Positive = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Seconds = Annotated[float, Field(gt=0, le=WEEK)]
Fraction = Annotated[float, Field(ge=0, le=1)]


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
        raise InputError(format_validation_error(exc, document, model)) from None


def format_validation_error(
    exc: ValidationError, document: YamlDocument, model: type[BaseModel] | None = None
) -> str:
    errors = sorted(exc.errors(include_url=False), key=lambda e: document.position(e["loc"]))
    return "\n".join(
        f"{document.where(e['loc'])}: {dotted(e['loc']) or '(top level)'}: {_message(e, model)}"
        for e in errors
    )


def _message(error: Any, model: type[BaseModel] | None) -> str:
    kind, message = error["type"], error["msg"]
    if kind == "extra_forbidden":
        return "unknown field" + _did_you_mean(model, error["loc"])
    if kind == "missing":
        return "required field is missing"
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    return f"{message} (got {error['input']!r})"


def _did_you_mean(model: type[BaseModel] | None, loc: tuple[str | int, ...]) -> str:
    """` (did you mean 'weights'?)` for a key close to a field of the mapping it is in."""
    parent = _model_at(model, loc[:-1]) if model else None
    if parent is None or not isinstance(loc[-1], str):
        return ""
    known = [field.alias or name for name, field in parent.model_fields.items()]
    close = difflib.get_close_matches(loc[-1], known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_at(annotation: Any, loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The schema a location of a document is validated against, if it is one: through
    fields, dict values, list items, optional and annotated types."""
    for part in loc:
        model = _model_in(annotation)
        if model is not None and isinstance(part, str) and part in model.model_fields:
            annotation = model.model_fields[part].annotation
        elif get_origin(_plain(annotation)) in (dict, list, tuple):
            annotation = get_args(_plain(annotation))[-1 if isinstance(part, str) else 0]
        else:
            return None
    return _model_in(annotation)


def _plain(annotation: Any) -> Any:
    """`X` for `Annotated[X, ...]` and for `X | None`."""
    if get_origin(annotation) is Annotated:
        return _plain(get_args(annotation)[0])
    members = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(members) == 1:
        return _plain(members[0])
    return annotation


def _model_in(annotation: Any) -> type[BaseModel] | None:
    plain = _plain(annotation)
    return plain if isinstance(plain, type) and issubclass(plain, BaseModel) else None
