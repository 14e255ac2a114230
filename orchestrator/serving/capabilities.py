"""vLLM's capability table (`vllm.yaml`, data beside this module): one row per version range.

Each row was read out of vLLM's own release files (`wheelfacts.py`); preflight and
`verify-config` judge a launch with it where the target's own vLLM cannot
(`server_check.py`). Loading is strict (a missing or mistyped key is an
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
RUNNER_VARIABLE = "VLLM_USE_V2_MODEL_RUNNER"

FULL_ATTENTION = "full_attention"
"""A mixed drafter's sliding layers run as full attention, silently."""
REFUSED = "refused"
"""A mixed drafter is refused at start (NotImplementedError), whatever the runner."""
V2_SELECTED = "v2_selected"
"""Served on the V2 model runner, which vLLM selects by itself for such a drafter."""
V2_DEFAULT = "v2_default"
"""Served on the V2 model runner, the default for every model."""
SERVED = "served"
"""Served: the V1 model runner is removed."""
V2_RUNNER = "v2_runner"
"""Served on the V2 runner only when the variable turns it on. No release read from
source does this (the lab's stand-in still names it)."""
MIXED_MODES = (FULL_ATTENTION, REFUSED, V2_SELECTED, V2_DEFAULT, SERVED, V2_RUNNER)
RUNNER_OFF_REFUSED = (V2_SELECTED, V2_DEFAULT)
"""Modes where `VLLM_USE_V2_MODEL_RUNNER=0` forces the V1 runner, which raises `error`."""
INTEGER, ONLY_1 = "integer", "only_1"
RUNNER_VALUES = (INTEGER, ONLY_1)


class UnknownVersion(ValueError):
    """A version string that does not parse, or that no row of the table covers."""


@dataclass(frozen=True)
class Row:
    """What one range of vLLM releases does; see the column notes in vllm.yaml."""

    range: SpecifierSet
    releases: tuple[str, ...]
    methods: tuple[str, ...]
    mixed_attention_drafters: str | None
    error: str | None
    runner_values: str | None
    lm_head_zero_for_conditional_generation: bool
    drafter_attention_backend: str
    v2_refused_methods: dict[str, str]
    request_temperature_max: float | None
    attention_backend_env_read: bool
    health_503_while_warming: bool
    per_request_spec_decode_metrics: bool
    sources: dict[str, str]
    quotes: dict[str, str]

    @property
    def runner_env(self) -> str | None:
        """The variable that chooses the model runner, when the release reads one."""
        return RUNNER_VARIABLE if self.runner_values else None

    def serves(self, method: str) -> bool:
        return method in self.methods


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
    for key in data:
        if key not in ROW_FIELDS:
            raise reader.error((*loc, key), "unknown field")
    text = reader.get(data, (*loc, "range"), str)
    try:
        versions = SpecifierSet(text)
    except InvalidSpecifier:
        raise reader.error((*loc, "range"), f"{text!r} is not a version specifier") from None
    methods = reader.get(data, (*loc, "methods"), list)
    if not all(isinstance(m, str) for m in methods):
        raise reader.error((*loc, "methods"), "expected a list of method names")
    return Row(
        range=versions,
        releases=tuple(str(r) for r in reader.get(data, (*loc, "releases"), list)),
        methods=tuple(methods),
        mixed_attention_drafters=reader.choice(
            data, (*loc, "mixed_attention_drafters"), MIXED_MODES
        ),
        error=reader.get(data, (*loc, "error"), str, optional=True),
        runner_values=reader.choice(data, (*loc, "runner_values"), RUNNER_VALUES),
        lm_head_zero_for_conditional_generation=reader.get(
            data, (*loc, "lm_head_zero_for_conditional_generation"), bool
        ),
        drafter_attention_backend=reader.get(data, (*loc, "drafter_attention_backend"), str),
        v2_refused_methods=reader.get(data, (*loc, "v2_refused_methods"), dict),
        request_temperature_max=_bound(reader, data, (*loc, "request_temperature_max")),
        attention_backend_env_read=reader.get(data, (*loc, "attention_backend_env_read"), bool),
        health_503_while_warming=reader.get(data, (*loc, "health_503_while_warming"), bool),
        per_request_spec_decode_metrics=reader.get(
            data, (*loc, "per_request_spec_decode_metrics"), bool
        ),
        sources=reader.get(data, (*loc, "sources"), dict),
        quotes=reader.get(data, (*loc, "quotes"), dict),
    )


def _bound(reader: _Reader, data: dict, loc: tuple[str | int, ...]) -> float | None:
    value = reader.get(data, loc, (int, float), optional=True)
    return None if value is None else float(value)


FACT_FIELDS = (
    "methods",
    "mixed_attention_drafters",
    "error",
    "runner_values",
    "lm_head_zero_for_conditional_generation",
    "drafter_attention_backend",
    "v2_refused_methods",
    "request_temperature_max",
    "attention_backend_env_read",
    "health_503_while_warming",
    "per_request_spec_decode_metrics",
)
"""The facts of a row, as `wheelfacts` reads them out of a release."""
ROW_FIELDS = ("range", "releases", *FACT_FIELDS, "sources", "quotes")


class _Reader:
    """Typed access to the parsed table; every problem names file:line and the field."""

    def __init__(self, document: YamlDocument) -> None:
        self.document = document

    def error(self, loc: tuple[str | int, ...], message: str) -> InputError:
        field = ".".join(str(p) for p in loc)
        return InputError(f"{self.document.where(loc)}: {field}: {message}")

    def choice(
        self, data: dict, loc: tuple[str | int, ...], allowed: tuple[str, ...]
    ) -> str | None:
        """An optional field holding one of `allowed`."""
        value = self.get(data, loc, str, optional=True)
        if value is not None and value not in allowed:
            raise self.error(loc, f"expected one of {allowed}")
        return value

    def get(
        self,
        data: dict,
        loc: tuple[str | int, ...],
        kind: type | tuple[type, ...],
        optional: bool = False,
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
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise self.error(loc, f"expected {names}, got {value!r}")
        return value
