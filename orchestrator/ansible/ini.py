"""Ansible's INI inventory, parsed strictly, every error at file:line.

configparser does not fit: host lines are `name key=value ...` (shell words),
the same section may come twice, and values are Python literals. The rules are
ansible-core's `plugins/inventory/ini.py` (`InventoryModule._parse`): lines
before any section belong to `ungrouped`; `#` and `;` start comment lines;
`[group]` holds host lines, `[group:vars]` `key=value` lines, `[group:children]`
group names, each child declared somewhere in the file; values are read with
`ast.literal_eval` when they are a literal, else kept as text (which evaluates
nothing: literal_eval builds constants only).
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from typing import Any

from orchestrator.ansible.source import AnsibleInventory, Setting
from orchestrator.errors import InputError

SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")
COMMENT = ("#", ";")
MAX_VALUE_CHARS = 4096
"""Longer values stay text: literal_eval of a huge nested literal could exhaust the stack."""


def parse_ini(text: str, source: str) -> AnsibleInventory:
    inventory = AnsibleInventory(source)
    group, state = "ungrouped", "hosts"
    inventory.group("ungrouped", f"{source}:1")
    declared: set[str] = {"ungrouped", "all"}
    wanted: dict[str, str] = {}  # a child or :vars group not yet declared -> where
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{source}:{number}"
        line = raw.strip()
        if not line or line.startswith(COMMENT):
            continue
        section = SECTION.match(line)
        if section:
            group, tag = section.group(1), section.group(2) or "hosts"
            if tag not in ("hosts", "children", "vars"):
                raise InputError(f"{where}: [{group}:{tag}]: unknown section type {tag!r}")
            state = tag
            inventory.group(group, where)
            if tag == "vars":
                wanted.setdefault(group, where)
            else:
                declared.add(group)
            continue
        if line.startswith("["):
            raise InputError(f"{where}: {line!r} is not a section header ([group] or [group:type])")
        if state == "hosts":
            pattern, variables = _host_line(line, where)
            inventory.add_host(pattern, where, group, variables)
        elif state == "vars":
            key, equals, value = line.partition("=")
            if not equals or not key.strip():
                raise InputError(f"{where}: [{group}:vars]: expected key=value, got {line!r}")
            inventory.groups[group].vars[key.strip()] = Setting(_value(value.strip()), where)
        else:
            child = GROUP_NAME.match(line)
            if not child:
                raise InputError(
                    f"{where}: [{group}:children]: expected a group name, got {line!r}"
                )
            name = child.group(1)
            if name not in inventory.groups[group].children:
                inventory.groups[group].children.append(name)
            inventory.group(name, where)
            wanted.setdefault(name, where)
    for name, where in wanted.items():
        if name not in declared:
            raise InputError(
                f"{where}: group {name!r} is used here but never declared "
                f"(a [{name}] or [{name}:children] section)"
            )
    return inventory


def _host_line(line: str, where: str) -> tuple[str, dict[str, Setting]]:
    """`name key=value ...` as shell words, `#` starting a comment."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError as exc:
        raise InputError(f"{where}: host line: {exc}") from None
    variables = {}
    for word in words[1:]:
        key, equals, value = word.partition("=")
        if not equals or not key:
            raise InputError(f"{where}: host {words[0]}: expected key=value, got {word!r}")
        variables[key] = Setting(_value(value), where)
    return words[0], variables


def _value(text: str) -> Any:
    """A Python literal's value (numbers, quoted strings, lists, dicts, True, None),
    else the text itself, as Ansible reads INI values; tuples become lists, and what
    is not plain data (sets, bytes, complex numbers) stays text."""
    if len(text) > MAX_VALUE_CHARS:
        return text
    try:
        return json.loads(json.dumps(ast.literal_eval(text)))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
