"""The Jinja2 environment for templates and playbook fields.

StrictUndefined makes a missing variable an error that names it and the
template line; `shquote` quotes a value for POSIX sh; `tojson` renders JSON.
"""

from __future__ import annotations

import json
import shlex
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any

import jinja2

from orchestrator.errors import InputError

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


def to_json(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=False)


@cache
def environment(template_dir: Path = TEMPLATE_DIR) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shquote"] = lambda value: shlex.quote(str(value))
    env.filters["tojson"] = to_json
    return env


def render_template(name: str, context: dict[str, Any], template_dir: Path = TEMPLATE_DIR) -> str:
    """Render a template file; any template error names the file and line."""
    env = environment(template_dir)
    try:
        return env.get_template(name).render(context)
    except jinja2.TemplateNotFound:
        raise InputError(f"template {name!r} not found in {template_dir}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise InputError(f"{template_dir / name}:{exc.lineno}: {exc.message}") from None
    except jinja2.UndefinedError as exc:
        line = _template_line(exc.__traceback__, str(template_dir / name))
        raise InputError(f"{template_dir / name}:{line}: {exc.message}") from None


def template_source(name: str, template_dir: Path = TEMPLATE_DIR) -> str:
    """A template's text, so that a release's fingerprint changes when the template does."""
    env = environment(template_dir)
    assert env.loader is not None
    try:
        return env.loader.get_source(env, name)[0]
    except jinja2.TemplateNotFound:
        raise InputError(f"template {name!r} not found in {template_dir}") from None


def render_field(text: str, context: dict[str, Any], where: str) -> str:
    """Render a playbook field such as `{{ vars.models_dir }}/Qwen3.6-27B`."""
    try:
        return environment().from_string(text).render(context)
    except jinja2.TemplateError as exc:
        raise InputError(f"{where}: {exc.message}") from None


def _template_line(tb: TracebackType | None, filename: str) -> int | str:
    line: int | str = "?"
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
