"""YAML documents that remember where every value came from.

Errors in an inventory or playbook must point at file:line:column, so the
loader records the position of each mapping key and sequence item while it
builds plain Python data. Loading is safe (SafeLoader), refuses duplicate keys
(PyYAML would silently keep the last one) and refuses oversized files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import InputError

MAX_DOCUMENT_BYTES = 1 << 20

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class YamlDocument:
    """Parsed data plus the (line, column) of every key and item, 1-based."""

    source: str
    data: Any
    positions: dict[Loc, tuple[int, int]] = field(default_factory=dict)
    origins: dict[Loc, str] = field(default_factory=dict)
    """Values set from elsewhere (the command line), by where they came from."""

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


def dotted(loc: Iterable[str | int]) -> str:
    """('containers', 'ct1', 'gpus', 0) -> 'containers.ct1.gpus[0]'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def load_yaml_file(path: Path) -> YamlDocument:
    """Read and parse one YAML file, refusing what is too big to be a config."""
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise InputError(f"{path}: {size} bytes is too large (limit {MAX_DOCUMENT_BYTES})")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, source: str) -> YamlDocument:
    """Parse YAML text; errors name the source, line and column."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise InputError(f"{where}: invalid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: invalid YAML: {exc}") from None
    if node is None:
        return YamlDocument(source, None)
    positions: dict[Loc, tuple[int, int]] = {}
    data = _construct(node, (), positions, source)
    return YamlDocument(source, data, positions)


def _construct(
    node: yaml.Node, loc: Loc, positions: dict[Loc, tuple[int, int]], source: str
) -> Any:
    positions.setdefault(loc, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode | yaml.SequenceNode) and node.tag not in PLAIN_TAGS:
        raise InputError(f"{_mark(source, node)}: tag {node.tag!r} is not allowed")
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                value = _construct(value_node, loc, positions, source)
                for mapping in value if isinstance(value, list) else [value]:
                    if not isinstance(mapping, dict):
                        raise InputError(f"{_mark(source, key_node)}: '<<' needs a mapping")
                    merged = {**mapping, **merged}
                continue
            key = _scalar(key_node, source)
            if key in result:
                raise InputError(f"{_mark(source, key_node)}: {dotted((*loc, key))}: duplicate key")
            positions[(*loc, key)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            result[key] = _construct(value_node, (*loc, key), positions, source)
        return {**merged, **result}
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, (*loc, i), positions, source) for i, item in enumerate(node.value)]
    return _scalar(node, source)


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
