"""`orch explain`: every playbook and inventory field with its type, default and
meaning, read from the pydantic schemas themselves (their JSON schema for types and
ranges, `Field(description=...)` for meanings), as `kubectl explain` reads the API's.

`docs/playbook.md` and `docs/inventory.md` are `markdown()` of the same entries; a
unit test fails when they differ from the schemas.
"""

from __future__ import annotations

import difflib
import functools
import json
import typing
from collections.abc import Iterator
from typing import Annotated, Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from orchestrator.errors import InputError
from orchestrator.inventory import Inventory
from orchestrator.playbook import Playbook

SchemaNode = dict[str, Any]
"""A node of a JSON Schema as pydantic's `model_json_schema` writes it: its keywords
(`type`, `anyOf`, `$ref`, `minimum`, ...) are JSON Schema's."""

ROOTS: dict[str, type[BaseModel]] = {"playbook": Playbook, "inventory": Inventory}
KEY = "<name>"
"""Stands for a key of a mapping of sections (a host's or container's name)."""


@pydantic.dataclasses.dataclass(frozen=True, config=ConfigDict(serialize_by_alias=True))
class Entry:
    """One field of a schema, where it stands in its document."""

    path: str
    root: Annotated[str, Field(serialization_alias="schema")]
    type_text: Annotated[str, Field(serialization_alias="type")]
    default: str | None
    """As YAML would spell it; None when the field is required or a section."""
    required: bool
    description: str
    section: Annotated[type[BaseModel] | None, Field(exclude=True)]
    """The model of a section (or of each value of a mapping of sections)."""
    mapping: Annotated[bool, Field(exclude=True)] = False
    """A mapping of sections: its fields stand under `PATH.<name>.`."""

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


@functools.cache
def entries(root: str) -> tuple[Entry, ...]:
    """Every field under a root, depth first, in the schema's order (the schemas are
    fixed at import: read once)."""
    return tuple(_walk(root, ROOTS[root], ""))


def _walk(root: str, model: type[BaseModel], prefix: str) -> Iterator[Entry]:
    properties = model.model_json_schema()["properties"]
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        section, mapping = _section(info.annotation)
        path = f"{prefix}{name}"
        yield Entry(
            root=root,
            path=path,
            type_text=_type_text(properties[name]),
            default=None if info.is_required() or section else _yaml(info.default),
            required=info.is_required(),
            description=info.description or section_summary(section),
            section=section,
            mapping=mapping,
        )
        if section is not None:
            yield from _walk(root, section, f"{path}.{KEY}." if mapping else f"{path}.")


def _section(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(the model a field holds, whether as the values of a mapping), or (None, False)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if typing.get_origin(annotation) is dict:
        model, _ = _section(typing.get_args(annotation)[1])
        return model, model is not None
    for argument in typing.get_args(annotation):
        model, mapping = _section(argument)
        if model is not None:
            return model, mapping
    return None, False


def _yaml(value: Any) -> str:
    """A default as a YAML flow value (JSON is YAML)."""
    return json.dumps(to_jsonable_python(value), ensure_ascii=False)


def _type_text(node: SchemaNode) -> str:
    """A JSON schema node in words: `integer 1..1000000`, `list of string`, ..."""
    if "$ref" in node:
        return "section " + node["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in node:
        options = [_type_text(option) for option in node["anyOf"]]
        return " or ".join(f"({o})" if " " in o and len(options) > 1 else o for o in options)
    if "enum" in node:
        return "one of " + ", ".join(_yaml(value) for value in node["enum"])
    if "const" in node:
        return _yaml(node["const"])
    kind = node.get("type")
    if kind in ("integer", "number"):
        return " ".join(filter(None, [kind, _range(node)]))
    if kind == "string":
        return f"string matching {node['pattern']}" if "pattern" in node else "string"
    if kind == "array":
        items = _type_text(node.get("items", {}))
        least = f", at least {node['minItems']}" if "minItems" in node else ""
        return f"list of ({items}){least}" if " " in items else f"list of {items}{least}"
    if kind == "object":
        return _mapping_text(node)
    return kind or "any"


def _range(node: SchemaNode) -> str:
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None and high is not None:
        return f"{_number(low)}..{_number(high)}"
    parts = []
    if low is not None:
        parts.append(f">= {_number(low)}")
    if "exclusiveMinimum" in node:
        parts.append(f"> {_number(node['exclusiveMinimum'])}")
    if high is not None:
        parts.append(f"<= {_number(high)}")
    if "exclusiveMaximum" in node:
        parts.append(f"< {_number(node['exclusiveMaximum'])}")
    return ", ".join(parts)


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _mapping_text(node: SchemaNode) -> str:
    patterns = node.get("patternProperties") or {}
    if patterns:
        ((pattern, values),) = patterns.items()
        return f"mapping of (key matching {pattern}) to {_type_text(values)}"
    values = node.get("additionalProperties")
    if isinstance(values, dict) and values:
        return f"mapping to {_type_text(values)}"
    return "mapping"


def find(path: str) -> Entry | None:
    """The entry a dotted path names, or None for the roots themselves.

    `playbook.` or `inventory.` may lead; without it the path is looked up in
    both (their top-level fields differ). Below a mapping of sections the key may
    be given (`hosts.pve1.address`) or left out (`hosts.address`).
    """
    root, parts = _split(path)
    if not parts:
        return None
    for candidate in [root] if root else list(ROOTS):
        found = _lookup(candidate, parts)
        if found is not None:
            return found
    raise InputError(f"explain: no field {path!r}" + _did_you_mean(path))


def _split(path: str) -> tuple[str | None, list[str]]:
    parts = [part for part in path.strip().split(".") if part]
    if parts and parts[0] in ROOTS:
        return parts[0], parts[1:]
    return None, parts


def _lookup(root: str, parts: list[str]) -> Entry | None:
    by_path = {entry.path: entry for entry in entries(root)}
    path, current = "", None
    for index, part in enumerate(parts):
        if current is not None and current.mapping and not path.endswith(KEY):
            path = f"{path}.{KEY}"
            if f"{path}.{part}" not in by_path:
                if index == len(parts) - 1 and _near_field(part, by_path, path):
                    return None  # a misspelt field, not a name
                continue  # `part` is a key of the mapping (or `<name>` itself)
        path = f"{path}.{part}" if path else part
        current = by_path.get(path)
        if current is None:
            return None
    return current


def _near_field(part: str, by_path: dict[str, Entry], prefix: str) -> bool:
    names = [p.removeprefix(f"{prefix}.") for p in by_path if p.startswith(f"{prefix}.")]
    return bool(difflib.get_close_matches(part, names, n=1, cutoff=0.75))


def _did_you_mean(path: str) -> str:
    """`; did you mean: a, b?` from the paths closest to what was typed, or ``."""
    _, parts = _split(path)
    typed = ".".join(parts)
    known = [entry.path for root in ROOTS for entry in entries(root)]
    plain = {p.replace(f".{KEY}", ""): p for p in known}
    close = difflib.get_close_matches(typed, list(plain), n=3, cutoff=0.6)
    last = parts[-1] if parts else typed
    by_name = [p for p in plain if p.rsplit(".", 1)[-1] == last]
    near_names = difflib.get_close_matches(
        last, sorted({p.rsplit(".", 1)[-1] for p in plain}), n=2, cutoff=0.75
    )
    by_near = [p for p in plain if p.rsplit(".", 1)[-1] in near_names]
    suggestions = list(dict.fromkeys([*by_name, *by_near, *close]))[:3]
    return f"; did you mean: {', '.join(suggestions)}?" if suggestions else ""


def children(entry: Entry | None, root: str) -> list[Entry]:
    """The fields directly inside a section (or a root's top-level fields)."""
    prefix = "" if entry is None else entry.path + "."
    found = []
    for candidate in entries(root):
        rest = candidate.path.removeprefix(prefix)
        if candidate.path.startswith(prefix) and "." not in rest.removeprefix(f"{KEY}."):
            found.append(candidate)
    return found


def section_summary(model: type[BaseModel] | None) -> str:
    """A section's own docstring, one paragraph."""
    text = (model.__doc__ or "") if model else ""
    return " ".join(text.split())


def text(path: str | None) -> str:
    """What `orch explain PATH` prints."""
    entry = find(path) if path else None
    if entry is None:
        return "\n".join(_root_text(root) for root in _roots(path))
    lines = [
        f"FIELD:    {entry.path} ({entry.root})",
        f"TYPE:     {entry.type_text}",
        f"DEFAULT:  {_default_words(entry)}",
        "",
        entry.description,
    ]
    if entry.section is not None:
        lines[-1:] = _section_words(entry)
        lines += ["", "FIELDS:", *_field_lines(children(entry, entry.root))]
    return "\n".join(lines) + "\n"


def _roots(path: str | None) -> list[str]:
    """The roots a path without a field names: the one it starts with, or both."""
    root = _split(path)[0] if path else None
    return [root] if root else list(ROOTS)


def _section_words(entry: Entry) -> list[str]:
    """A section field's description, then its model's docstring when that says more."""
    summary = section_summary(entry.section)
    return [entry.description, summary] if summary != entry.description else [summary]


def _root_text(root: str) -> str:
    model = ROOTS[root]
    lines = [f"{root.upper()}: {section_summary(model)}", "", "FIELDS:"]
    return "\n".join([*lines, *_field_lines(children(None, root)), ""])


def _default_words(entry: Entry) -> str:
    if entry.required:
        return "required"
    return "(section)" if entry.default is None else entry.default


def _field_lines(fields: list[Entry]) -> list[str]:
    lines = []
    for field in fields:
        default = "required" if field.required else field.default
        tail = f" (default {default})" if field.default is not None else ""
        tail = " (required)" if field.required else tail
        lines += [f"  {field.name}  <{field.type_text}>{tail}", f"      {field.description}"]
    return lines


def markdown(root: str) -> str:
    """The reference page of one schema: docs/playbook.md or docs/inventory.md."""
    model = ROOTS[root]
    lines = [
        f"# {root.capitalize()} fields",
        "",
        f"<!-- Generated by `orch explain --markdown {root} > docs/{root}.md` from the "
        "schemas in orchestrator/; tests/test_explain.py fails when they differ. -->",
        "",
        section_summary(model),
        "",
        f"`orch explain PATH` prints one field (e.g. `orch explain {_example(root)}`). "
        f"`{KEY}` stands for a name you choose.",
        "",
    ]
    sections = [None, *(e for e in entries(root) if e.section is not None)]
    for section in sections:
        title = "Top level" if section is None else f"`{section.path}`"
        lines += [f"## {title}", ""]
        if section is not None:
            lines += [" ".join(_section_words(section)), ""]
        lines += ["| field | type | default | meaning |", "|---|---|---|---|"]
        for field in children(section, root):
            default = "required" if field.required else (field.default or "(section)")
            cells = [f"`{field.path}`", f"`{field.type_text}`", _code(default), field.description]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _example(root: str) -> str:
    return "gate.min_drafts" if root == "playbook" else "containers.access"


def _code(value: str) -> str:
    return value if value in ("required", "(section)") else f"`{value}`"


def _cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def described(path: str | None) -> tuple[Entry | None, list[Entry]]:
    """`orch explain --json`'s: the field asked for (None for a root), then the fields
    inside it (a section's, or the roots' top-level fields)."""
    entry = find(path) if path else None
    if entry is None:
        return None, [field for root in _roots(path) for field in children(None, root)]
    return entry, children(entry, entry.root) if entry.section else []
