"""vLLM's capability table (`vllm.yaml`, data beside this module): one row per version range.

Preflight, `verify-config` and the lab's vLLM stand-in all read the table here, so
the facts live in one place. Loading is strict (a missing or mistyped key is an
`InputError` naming the file, line and field) and imports stay light: the lab's
stand-in loads this module at every start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from orchestrator.errors import InputError
from orchestrator.yamlsource import YamlDocument, load_yaml_file

TABLE_FILE = "vllm.yaml"
METHODS = ("dflash", "eagle3", "mtp", "draft_model", "ngram")

FULL_ATTENTION = "full_attention"
"""Sliding layers of a mixed drafter run as full attention, silently."""
REFUSED = "refused"
"""A mixed drafter is refused at start (NotImplementedError)."""
V2_RUNNER = "v2_runner"
"""A mixed drafter is served on the V2 model runner only (`runner_env` turns it on)."""
MIXED_MODES = (FULL_ATTENTION, REFUSED, V2_RUNNER)


class UnknownVersion(ValueError):
    """A version string that does not parse, or that no row of the table covers."""


@dataclass(frozen=True)
class Row:
    """What one range of vLLM releases does; see the column notes in vllm.yaml."""

    range: SpecifierSet
    methods: dict[str, bool | None]
    mixed_attention_drafters: str | None
    error: str | None
    runner_env: str | None
    lm_head_zero_for_conditional_generation: bool
    health_503_while_warming: bool
    sources: tuple[str, ...]
    unconfirmed: tuple[str, ...]

    def serves(self, method: str) -> bool | None:
        """True or False as recorded; None when the table does not say."""
        return self.methods.get(method)


@dataclass(frozen=True)
class Capabilities:
    """The row for a version; `assumed` when the version is newer than every row."""

    version: Version
    row: Row
    assumed: bool = False


@dataclass(frozen=True)
class Table:
    source: str
    newest_release: Version
    rows: tuple[Row, ...]


def parse_version(text: str) -> Version:
    """A PEP 440 version (`0.27.1`, `v0.26.0rc1`, `0.27.1+cu129`); anything else raises."""
    try:
        return Version(text.strip())
    except InvalidVersion:
        raise UnknownVersion(f"{text.strip()[:80]!r} is not a version") from None


def capabilities_for(version: str | Version, table: Table | None = None) -> Capabilities:
    """The row covering `version`; the newest row, marked assumed, for a newer release.

    A pre-release, dev or local build is judged by its release (`0.26.0rc1` as
    `0.26.0`): release candidates carry what the release will.
    """
    table = table or load_table()
    parsed = parse_version(version) if isinstance(version, str) else version
    release = Version(parsed.base_version)
    for row in table.rows:
        if row.range.contains(release):
            return Capabilities(parsed, row)
    newest = table.rows[-1]
    upper = [s for s in newest.range if s.operator in ("<", "<=")]
    if upper and not any(s.contains(release) for s in upper):
        return Capabilities(parsed, newest, assumed=True)
    raise UnknownVersion(f"no row of {table.source} covers vLLM {parsed}")


def newest_version(table: Table | None = None) -> str:
    """The newest release the table knows by name (the lab's default)."""
    return str((table or load_table()).newest_release)


def first_release_where(
    predicate: Callable[[Row], bool | None], after: Version, table: Table | None = None
) -> str | None:
    """The first release newer than `after` whose row satisfies `predicate`: the X of
    "upgrade to >= X" (None when no row does)."""
    for row in (table or load_table()).rows:
        bounds = [Version(s.version) for s in row.range if s.operator in (">=", "==")]
        if bounds and bounds[0] > after and predicate(row):
            return str(bounds[0])
    return None


@cache
def load_table(path: Path | None = None) -> Table:
    """The package's table, or another file with the same layout (tests)."""
    if path is None:
        with resources.as_file(resources.files(__package__) / TABLE_FILE) as packaged:
            return _table(load_yaml_file(packaged))
    return _table(load_yaml_file(path))


def _table(document: YamlDocument) -> Table:
    data = document.data
    if not isinstance(data, dict):
        raise InputError(f"{document.source}:1:1: expected a mapping at the top level")
    reader = _Reader(document)
    rows = reader.get(data, ("rows",), list)
    if not rows:
        raise InputError(f"{document.where(('rows',))}: rows: the table has no rows")
    parsed = tuple(_row(reader, row, ("rows", i)) for i, row in enumerate(rows))
    newest = reader.get(data, ("newest_release",), str)
    try:
        newest_release = parse_version(newest)
    except UnknownVersion as exc:
        raise reader.error(("newest_release",), str(exc)) from None
    if not parsed[-1].range.contains(newest_release):
        raise reader.error(("newest_release",), f"{newest} is not in the last row's range")
    return Table(document.source, newest_release, parsed)


def _row(reader: _Reader, data: Any, loc: tuple[str | int, ...]) -> Row:
    if not isinstance(data, dict):
        raise reader.error(loc, "expected a mapping")
    known = {
        "range",
        "methods",
        "mixed_attention_drafters",
        "error",
        "runner_env",
        "lm_head_zero_for_conditional_generation",
        "health_503_while_warming",
        "sources",
        "unconfirmed",
    }
    for key in data:
        if key not in known:
            raise reader.error((*loc, key), "unknown field")
    text = reader.get(data, (*loc, "range"), str)
    try:
        versions = SpecifierSet(text)
    except InvalidSpecifier:
        raise reader.error((*loc, "range"), f"{text!r} is not a version specifier") from None
    methods = reader.get(data, (*loc, "methods"), dict)
    for name, value in methods.items():
        if name not in METHODS or not (value is None or isinstance(value, bool)):
            raise reader.error(
                (*loc, "methods", name), f"expected one of {METHODS} with true, false or null"
            )
    mixed = reader.get(data, (*loc, "mixed_attention_drafters"), str, optional=True)
    if mixed is not None and mixed not in MIXED_MODES:
        raise reader.error((*loc, "mixed_attention_drafters"), f"expected one of {MIXED_MODES}")
    runner_env = reader.get(data, (*loc, "runner_env"), str, optional=True)
    if mixed == V2_RUNNER and not runner_env:
        raise reader.error((*loc, "runner_env"), "v2_runner needs the variable that turns it on")
    return Row(
        range=versions,
        methods={name: methods.get(name) for name in METHODS},
        mixed_attention_drafters=mixed,
        error=reader.get(data, (*loc, "error"), str, optional=True),
        runner_env=runner_env,
        lm_head_zero_for_conditional_generation=reader.get(
            data, (*loc, "lm_head_zero_for_conditional_generation"), bool
        ),
        health_503_while_warming=reader.get(data, (*loc, "health_503_while_warming"), bool),
        sources=tuple(reader.get(data, (*loc, "sources"), list)),
        unconfirmed=tuple(reader.get(data, (*loc, "unconfirmed"), list, optional=True) or ()),
    )


class _Reader:
    """Typed access to the parsed table; every problem names file:line and the field."""

    def __init__(self, document: YamlDocument) -> None:
        self.document = document

    def error(self, loc: tuple[str | int, ...], message: str) -> InputError:
        field = ".".join(str(p) for p in loc)
        return InputError(f"{self.document.where(loc)}: {field}: {message}")

    def get(
        self, data: dict, loc: tuple[str | int, ...], kind: type, optional: bool = False
    ) -> Any:
        key = loc[-1]
        if key not in data:
            if optional:
                return None
            raise self.error(loc, "required field is missing")
        value = data[key]
        if value is None and optional:
            return None
        if not isinstance(value, kind):
            raise self.error(loc, f"expected {kind.__name__}, got {value!r}")
        return value
