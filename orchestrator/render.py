"""The Jinja2 environment for templates and playbook fields.

Playbook fields and `--set` values are user text rendered on the control
machine, so the environment is Jinja's immutable sandbox (no attribute that
reaches Python internals, no mutation) with nothing but the two filters the
templates use, no globals, and bounded `*` and `**` so that no expression can
exhaust memory. StrictUndefined makes a missing variable an error that names
it and the template line; `shquote` quotes a value for POSIX sh; `tojson`
renders JSON.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from functools import cache, partial
from pathlib import Path
from types import TracebackType
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from orchestrator.errors import InputError
from orchestrator.layout import OWN_RELEASE, RELEASE_WORD

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
MAX_REPEAT_ITEMS = 1 << 16
"""The longest string or list `*` may build."""
MAX_POWER = (1 << 64, 64)
"""The largest base and exponent `**` accepts: big numbers, never a memory-sized one."""
RENDER_ERRORS = (jinja2.TemplateError, ArithmeticError, LookupError, TypeError, ValueError)
"""What evaluating user expressions can raise: each is bad input, never a traceback."""


def to_json(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=False)


def shquote(value: Any) -> str:
    """`value` as one shell word; where it names the launch script's own release
    (OWN_RELEASE), the script's `$release` stands in, double-quoted."""
    return RELEASE_WORD.join(shlex.quote(part) for part in str(value).split(OWN_RELEASE))


class _Sandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with `*` and `**` refused beyond a bound."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(
        self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any
    ) -> Any:
        if operator == "*" and max(_repeat(left, right), _repeat(right, left)) > MAX_REPEAT_ITEMS:
            raise SecurityError(f"a repetition longer than {MAX_REPEAT_ITEMS} items")
        if operator == "**" and not _small_power(left, right):
            raise SecurityError(f"a power beyond {MAX_POWER[0]} ** {MAX_POWER[1]}")
        return super().call_binop(context, operator, left, right)


def _repeat(sequence: Any, times: Any) -> int:
    if isinstance(sequence, str | bytes | list | tuple) and isinstance(times, int):
        return len(sequence) * times
    return 0


def _small_power(base: Any, exponent: Any) -> bool:
    numbers = all(isinstance(v, int | float) for v in (base, exponent))
    return not numbers or (abs(base) <= MAX_POWER[0] and abs(exponent) <= MAX_POWER[1])


class Missing(jinja2.UndefinedError):
    """A name or attribute a template asked for and its context lacks: which, of what."""

    def __init__(self, owner: Any, name: str | None, message: str) -> None:
        super().__init__(message)
        self.owner, self.name = owner, name


class _Strict(jinja2.StrictUndefined):
    """StrictUndefined whose error keeps what was missing, so a caller can say where
    to set it (an inventory's vars) rather than "'dict object' has no attribute"."""

    __slots__ = ()

    def __init__(
        self,
        hint: str | None = None,
        obj: Any = jinja2.utils.missing,
        name: str | None = None,
        exc: Any = None,
    ) -> None:
        # `exc` is given by the sandbox (SecurityError) and kept; otherwise a Missing that
        # knows what was missing (jinja calls `exc(message)`, as a partial allows)
        missing = partial(Missing, obj, name)
        super().__init__(hint, obj, name, exc or missing)  # type: ignore[arg-type]


class MissingVar(InputError):
    """A playbook field refers to `vars.NAME` and the container has no such var."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


@cache
def environment(template_dir: Path = TEMPLATE_DIR) -> jinja2.Environment:
    env = _Sandbox(
        loader=jinja2.FileSystemLoader(template_dir),
        undefined=_Strict,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters = {"shquote": shquote, "tojson": to_json}
    env.tests = {}
    env.globals = {}
    return env


def render_template(
    name: str, context: Mapping[str, Any], template_dir: Path = TEMPLATE_DIR
) -> str:
    """Render a template file; any template error names the file and line."""
    env = environment(template_dir)
    try:
        return env.get_template(name).render(context)
    except jinja2.TemplateNotFound:
        raise InputError(f"template {name!r} not found in {template_dir}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise InputError(f"{template_dir / name}:{exc.lineno}: {exc.message}") from None
    except RENDER_ERRORS as exc:
        line = _template_line(exc.__traceback__, str(template_dir / name))
        raise InputError(f"{template_dir / name}:{line}: {_reason(exc)}") from None


def template_source(name: str, template_dir: Path = TEMPLATE_DIR) -> str:
    """A template's text, so that a release's fingerprint changes when the template does."""
    env = environment(template_dir)
    assert env.loader is not None
    try:
        return env.loader.get_source(env, name)[0]
    except jinja2.TemplateNotFound:
        raise InputError(f"template {name!r} not found in {template_dir}") from None


def render_field(text: str, context: Mapping[str, Any], where: str) -> str:
    """Render a playbook field such as `{{ vars.models_dir }}/Qwen3.6-27B`; a var the
    context's `vars` lacks is a MissingVar naming it."""
    try:
        return environment().from_string(text).render(context)
    except Missing as exc:
        if exc.owner is context.get("vars") and exc.name:
            raise MissingVar(f"{where}: needs vars.{exc.name}", exc.name) from None
        raise InputError(f"{where}: {_reason(exc)}") from None
    except RENDER_ERRORS as exc:
        raise InputError(f"{where}: {_reason(exc)}") from None


def _reason(exc: Exception) -> str:
    if isinstance(exc, SecurityError):
        return f"not allowed in a template: {exc}"
    if isinstance(exc, jinja2.TemplateError):
        return exc.message or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


def _template_line(tb: TracebackType | None, filename: str) -> int | str:
    line: int | str = "?"
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
