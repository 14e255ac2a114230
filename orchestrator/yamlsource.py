"""YAML documents that remember where every value came from.

Errors in an inventory or playbook must point at file:line:column, so the
loader records the position of each mapping key and sequence item while it
builds plain Python data. Loading is safe (SafeLoader), refuses duplicate keys
(PyYAML would silently keep the last one), and refuses what a hostile file
could use to exhaust the control machine: anything but a regular file (a
device, a FIFO), oversized files, nesting beyond MAX_DEPTH, aliases that
expand beyond MAX_VALUES values (a "billion laughs") or refer to themselves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import InputError

MAX_DOCUMENT_BYTES = 1 << 20
MAX_DEPTH = 64
"""Mappings and sequences inside each other; real inventories and playbooks use under 10."""
MAX_VALUES = 100_000
"""Values a document may build, aliases counted each time they are used."""

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class YamlDocument:
    """Parsed data plus the (line, column) of every key and item, 1-based."""

    source: str
    data: Any
    positions: dict[Loc, tuple[int, int]] = field(default_factory=dict)
    origins: dict[Loc, str] = field(default_factory=dict)
    """Values set from elsewhere (the command line), by where they came from."""
    sha256: str = ""
    """SHA-256 of the file's text, as read (empty for text that came from no file)."""

    def where(self, loc: Iterable[str | int]) -> str:
        """`file:line:col` (or other origin) of the deepest known part of `loc`."""
        parts = self._known(loc)
        if parts in self.origins:
            return self.origins[parts]
        line, column = self.positions.get(parts, (1, 1))
        return f"{self.source}:{line}:{column}"

    def position(self, loc: Iterable[str | int]) -> tuple[int, int]:
        """(line, column) of the deepest known part of `loc`, for sorting."""
        return self.positions.get(self._known(loc), (1, 1))

    def _known(self, loc: Iterable[str | int]) -> Loc:
        parts = tuple(loc)
        while parts and parts not in self.positions and parts not in self.origins:
            parts = parts[:-1]
        return parts


def places(document: YamlDocument) -> dict[str, str]:
    """Where each key of the document stands (`file:line:col`, or the `--set` that
    set it), by its dotted path: for errors that name a field of a loaded file."""
    return {dotted(loc): document.where(loc) for loc in [*document.positions, *document.origins]}


def dotted(loc: Iterable[str | int]) -> str:
    """('containers', 'ct1', 'gpus', 0) -> 'containers.ct1.gpus[0]'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def load_yaml_file(path: Path) -> YamlDocument:
    """Read and parse one YAML file, refusing what cannot be a config file."""
    text, data = read_config_text(path)
    return dataclasses.replace(parse_yaml(text, str(path)), sha256=hashlib.sha256(data).hexdigest())


def read_config_text(path: Path) -> tuple[str, bytes]:
    """A config file's text and bytes: a regular file, at most MAX_DOCUMENT_BYTES, UTF-8."""
    try:
        # Non-blocking, so that opening a FIFO does not wait for a writer.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise InputError(f"{path}:1: not a regular file ({_file_kind(mode)})")
    with os.fdopen(descriptor, "rb") as file:
        try:
            data = file.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InputError(f"{path}:1: too large (more than {MAX_DOCUMENT_BYTES} bytes)")
    try:
        return data.decode("utf-8"), data
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not UTF-8 text ({exc.reason})") from None


def _file_kind(mode: int) -> str:
    kinds = {
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((kind for test, kind in kinds.items() if test(mode)), "not a file")


def parse_yaml(text: str, source: str) -> YamlDocument:
    """Parse YAML text; errors name the source, line and column."""
    try:
        node = yaml.compose(text, Loader=_BoundedLoader)
    except _TooDeep as exc:
        raise InputError(f"{source}:{exc.line}: nested deeper than {MAX_DEPTH} levels") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise InputError(f"{where}: invalid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: invalid YAML: {exc}") from None
    if node is None:
        return YamlDocument(source, None)
    return YamlDocument(source, *_Builder(source).build(node))


class _TooDeep(Exception):
    def __init__(self, line: int) -> None:
        self.line = line


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer (which recurses) refuses nesting beyond MAX_DEPTH."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _TooDeep(self.peek_event().start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _Builder:
    """Plain data from composed nodes, counting every value an alias expands to."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.positions: dict[Loc, tuple[int, int]] = {}
        self.values = 0
        self.open: set[int] = set()  # nodes being built: an alias to one refers to itself

    def build(self, node: yaml.Node) -> tuple[Any, dict[Loc, tuple[int, int]]]:
        return self._construct(node, ()), self.positions

    def _construct(self, node: yaml.Node, loc: Loc) -> Any:
        self.values += 1
        if self.values > MAX_VALUES:
            raise InputError(
                f"{_mark(self.source, node)}: aliases expand to more than {MAX_VALUES} values"
            )
        if len(loc) > MAX_DEPTH:
            raise InputError(f"{_mark(self.source, node)}: nested deeper than {MAX_DEPTH} levels")
        if id(node) in self.open:
            raise InputError(f"{_mark(self.source, node)}: an alias refers to itself")
        self.positions.setdefault(loc, (node.start_mark.line + 1, node.start_mark.column + 1))
        if not isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            return _scalar(node, self.source)
        if node.tag not in PLAIN_TAGS:
            raise InputError(f"{_mark(self.source, node)}: tag {node.tag!r} is not allowed")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self._construct(item, (*loc, i)) for i, item in enumerate(node.value)]
            return self._mapping(node, loc)
        finally:
            self.open.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, loc: Loc) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                value = self._construct(value_node, loc)
                for mapping in value if isinstance(value, list) else [value]:
                    if not isinstance(mapping, dict):
                        raise InputError(f"{_mark(self.source, key_node)}: '<<' needs a mapping")
                    merged = {**mapping, **merged}
                continue
            key = _scalar(key_node, self.source)
            if key in result:
                raise InputError(
                    f"{_mark(self.source, key_node)}: {dotted((*loc, key))}: duplicate key"
                )
            self.positions[(*loc, key)] = (
                key_node.start_mark.line + 1,
                key_node.start_mark.column + 1,
            )
            result[key] = self._construct(value_node, (*loc, key))
        return {**merged, **result}


def _scalar(node: yaml.Node, source: str) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise InputError(f"{_mark(source, node)}: mapping keys must be scalars")
    try:
        return _SCALARS.construct_object(node)
    except yaml.YAMLError as exc:
        raise InputError(f"{_mark(source, node)}: {getattr(exc, 'problem', exc)}") from None


def _mark(source: str, node: yaml.Node) -> str:
    return f"{source}:{node.start_mark.line + 1}:{node.start_mark.column + 1}"


MERGE_TAG = "tag:yaml.org,2002:merge"
PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")
_SCALARS = yaml.SafeLoader("")
