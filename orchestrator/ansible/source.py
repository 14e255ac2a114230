"""An Ansible inventory as Ansible builds it: hosts, groups with children, and
variables set on either, each remembered with the file:line that set it.

Read from YAML here, from INI in `ini.py`. Semantics follow ansible-core's
`plugins/inventory/yaml.py` and `ini.py` (top-level keys are groups; `hosts`,
`vars`, `children` under each; host patterns with ranges and `:port`) and
`inventory/helpers.py` for variable precedence (groups by depth, then name;
host variables last).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import InputError
from orchestrator.yamlsource import YamlDocument

RANGE = re.compile(r"\[([0-9a-zA-Z]+):([0-9a-zA-Z]+)(?::([0-9]+))?\]")
IPV6 = re.compile(r"\[([0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*)\](?::([0-9]+))?")
MAX_EXPANDED = 100_000
"""Hosts one pattern may expand to: a typo like [1:99999999] is refused, not allocated."""


@dataclass
class Setting:
    """A variable's value and where it was set (`file:line`)."""

    value: Any
    where: str


@dataclass
class Group:
    name: str
    where: str
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    vars: dict[str, Setting] = field(default_factory=dict)


@dataclass
class Host:
    name: str
    where: str
    vars: dict[str, Setting] = field(default_factory=dict)


@dataclass
class AnsibleInventory:
    """What an inventory file declares, before any mapping."""

    source: str
    hosts: dict[str, Host] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)

    def group(self, name: str, where: str) -> Group:
        return self.groups.setdefault(name, Group(name, where))

    def add_host(self, pattern: str, where: str, group: str, variables: dict[str, Setting]) -> None:
        """Every host a pattern names, in `group`, with its variables (a later line
        setting the same variable wins, as in Ansible)."""
        names, port = expand_pattern(pattern, where)
        for name in names:
            host = self.hosts.setdefault(name, Host(name, where))
            if port is not None:
                host.vars["ansible_port"] = Setting(port, where)
            host.vars.update(variables)
            members = self.group(group, where).hosts
            if name not in members:
                members.append(name)

    def host_vars(self, name: str) -> dict[str, Setting]:
        """A host's variables after precedence: `all`, then its groups from the
        shallowest to the deepest (by name within a depth), then the host's own."""
        depths = self._depths()
        chain = sorted(
            (g for g in self.groups if name in self.members(g)),
            key=lambda g: (depths.get(g, 1), g),
        )
        merged: dict[str, Setting] = {}
        for group in chain:
            merged.update(self.groups[group].vars)
        merged.update(self.hosts[name].vars)
        return merged

    def members(self, group: str, seen: frozenset[str] = frozenset()) -> list[str]:
        """The hosts of a group and of its children, in order of appearance."""
        if group == "all":
            return list(self.hosts)
        found = list(self.groups[group].hosts)
        for child in self.groups[group].children:
            if child not in seen:
                found += [h for h in self.members(child, seen | {group}) if h not in found]
        return found

    def _depths(self) -> dict[str, int]:
        """Each group's distance from `all` (Ansible's group depth)."""
        depths = {"all": 0}
        level = [g for g in self.groups if g != "all" and not self._parents(g)]
        depth = 1
        while level:
            for group in level:
                depths.setdefault(group, depth)
            level = [c for g in level for c in self.groups[g].children if c not in depths]
            depth += 1
        return depths

    def _parents(self, group: str) -> list[str]:
        return [g.name for g in self.groups.values() if group in g.children and g.name != "all"]


def expand_pattern(pattern: str, where: str) -> tuple[list[str], int | None]:
    """`web[01:03].lan:2222` -> (['web01.lan', 'web02.lan', 'web03.lan'], 2222);
    `[fd00::5]:22` -> (['fd00::5'], 22)."""
    name, port_text = pattern, None
    bracketed = IPV6.fullmatch(pattern)
    if bracketed:
        name, port_text = bracketed.groups()
    else:
        masked = RANGE.sub("R", pattern)
        if masked.count(":") == 1 and masked.rpartition(":")[2].isdigit():
            name, _, port_text = pattern.rpartition(":")
    port = int(port_text) if port_text else None
    if port is not None and not 1 <= port <= 65535:
        raise InputError(f"{where}: host {name!r}: port {port} is not 1..65535")
    if not name:
        raise InputError(f"{where}: host {pattern!r}: no host name")
    if bracketed:
        return [name], port
    names = [name]
    while any(RANGE.search(n) for n in names):
        names = [expanded for n in names for expanded in _expand_first(n, where)]
        if len(names) > MAX_EXPANDED:
            raise InputError(f"{where}: host pattern {pattern!r} names over {MAX_EXPANDED} hosts")
    return names, port


def _expand_first(name: str, where: str) -> list[str]:
    found = RANGE.search(name)
    assert found is not None
    start, end, step_text = found.groups()
    head, tail = name[: found.start()], name[found.end() :]
    step = int(step_text or 1)
    if step < 1:
        raise InputError(f"{where}: host range {found.group(0)}: the step must be at least 1")
    if start.isdigit() and end.isdigit():
        if int(start) > int(end) or int(end) - int(start) > MAX_EXPANDED * step:
            raise InputError(f"{where}: host range {found.group(0)}: not a usable range")
        width = len(start) if start.startswith("0") else 0
        items = [str(n).zfill(width) for n in range(int(start), int(end) + 1, step)]
    elif (
        len(start) == len(end) == 1
        and start in string.ascii_letters
        and end in string.ascii_letters
    ):
        letters = string.ascii_letters
        if letters.index(start) > letters.index(end):
            raise InputError(f"{where}: host range {found.group(0)}: starts after it ends")
        items = list(letters[letters.index(start) : letters.index(end) + 1 : step])
    else:
        raise InputError(
            f"{where}: host range {found.group(0)}: expected [START:END] of numbers or "
            "of single letters"
        )
    return [f"{head}{item}{tail}" for item in items]


def from_yaml(document: YamlDocument) -> AnsibleInventory:
    """Ansible's YAML inventory: top-level keys are groups (usually just `all`)."""
    if not isinstance(document.data, dict) or not document.data:
        raise InputError(f"{document.source}:1: expected a mapping of groups (e.g. `all:`)")
    if "plugin" in document.data:
        raise InputError(
            f"{document.where(('plugin',))}: an inventory plugin's configuration, not an "
            "inventory: dump it first with `ansible-inventory -i FILE --list --yaml`"
        )
    inventory = AnsibleInventory(document.source)
    for name, data in document.data.items():
        _yaml_group(inventory, document, str(name), data, (name,))
    return inventory


def _yaml_group(
    inventory: AnsibleInventory,
    document: YamlDocument,
    name: str,
    data: Any,
    loc: tuple[Any, ...],
) -> None:
    where = _line(document, loc)
    group = inventory.group(name, where)
    if data is None:
        return
    if not isinstance(data, dict):
        raise InputError(f"{where}: group {name}: expected a mapping (hosts, vars, children)")
    for key, value in data.items():
        here = (*loc, key)
        if isinstance(value, str):
            value = {value: None}  # Ansible takes `hosts: name` for `hosts: {name: }`
        if key not in ("hosts", "vars", "children"):
            raise InputError(
                f"{_line(document, here)}: group {name}: unknown key {key!r} "
                "(expected hosts, vars, children)"
            )
        if value is None:
            continue
        if not isinstance(value, dict):
            raise InputError(f"{_line(document, here)}: group {name}: {key} must be a mapping")
        if key == "vars":
            group.vars.update(_settings(document, value, here))
        elif key == "children":
            for child, child_data in value.items():
                _yaml_group(inventory, document, str(child), child_data, (*here, child))
                if str(child) not in group.children:
                    group.children.append(str(child))
        else:
            for pattern, host_vars in value.items():
                at = (*here, pattern)
                if host_vars is not None and not isinstance(host_vars, dict):
                    raise InputError(
                        f"{_line(document, at)}: host {pattern}: its variables must be a mapping"
                    )
                settings = _settings(document, host_vars or {}, at)
                inventory.add_host(str(pattern), _line(document, at), name, settings)


def _settings(document: YamlDocument, values: dict, loc: tuple[Any, ...]) -> dict[str, Setting]:
    return {str(k): Setting(v, _line(document, (*loc, k))) for k, v in values.items()}


def _line(document: YamlDocument, loc: tuple[Any, ...]) -> str:
    """`file:line` of a key (orch's YAML loader keeps every key's position)."""
    return document.where(loc).rsplit(":", 1)[0]
