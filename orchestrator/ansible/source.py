"""An Ansible inventory as Ansible builds it: hosts, groups with children, and
variables set on either, each remembered with the file:line that set it.

Read from YAML here, from INI in `ini.py`. Semantics follow ansible-core's
`plugins/inventory/yaml.py` and `ini.py` (top-level keys are groups; `hosts`,
`vars`, `children` under each; host patterns with ranges and `:port`) and
`inventory/helpers.py` for variable precedence (groups by depth, then name;
host variables last).
"""

from __future__ import annotations

import itertools
import math
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import InputError
from orchestrator.yamlsource import YamlDocument

RANGE = re.compile(r"\[([0-9a-zA-Z]+):([0-9a-zA-Z]+)(?::([0-9]+))?\]")
IPV6 = re.compile(r"\[([0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*)\](?::([0-9]+))?")
MAX_HOSTS = 10_000
"""Different hosts one inventory may name (a fleet of containers is far smaller): a
typo like [1:99999999] is refused by its size, computed before anything is expanded."""
MAX_EXPANSIONS = 100_000
"""Host names the patterns of one inventory may expand to in all, repeats counted: the
bound on work when the same hosts are listed again and again."""


AnsibleVars = dict[str, Any]
"""Variables as an Ansible inventory sets them, without where: their names and values
are the inventory author's."""


@dataclass
class Setting:
    """A variable's value and where it was set (`file:line`)."""

    value: Any
    where: str


@dataclass
class Group:
    name: str
    where: str
    hosts: dict[str, None] = field(default_factory=dict)
    """Its own hosts, in order of appearance (a dict: an ordered set)."""
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
    expanded: int = 0
    """Host names expanded from the patterns so far, repeats counted (MAX_EXPANSIONS)."""

    def group(self, name: str, where: str) -> Group:
        return self.groups.setdefault(name, Group(name, where))

    def add_host(self, pattern: str, where: str, group: str, variables: dict[str, Setting]) -> None:
        """Every host a pattern names, in `group`, with its variables (a later line
        setting the same variable wins, as in Ansible). The pattern's size is known
        before it is expanded: past MAX_HOSTS or the file's MAX_EXPANSIONS, nothing is."""
        parsed = parse_pattern(pattern, where)
        if parsed.size > MAX_HOSTS:
            raise InputError(
                f"{where}: host pattern {pattern!r} names {parsed.size} hosts, over the bound "
                f"of {MAX_HOSTS} hosts in one inventory"
            )
        self.expanded += parsed.size
        if self.expanded > MAX_EXPANSIONS:
            raise InputError(
                f"{where}: host pattern {pattern!r}: the host patterns of this inventory name "
                f"over {MAX_EXPANSIONS} hosts in all (the bound on work)"
            )
        members = self.group(group, where).hosts
        for name in parsed.names():
            host = self.hosts.get(name)
            if host is None:
                if len(self.hosts) == MAX_HOSTS:
                    raise InputError(
                        f"{where}: host {name}: over the bound of {MAX_HOSTS} hosts in one "
                        "inventory"
                    )
                host = self.hosts[name] = Host(name, where)
            if parsed.port is not None:
                host.vars["ansible_port"] = Setting(parsed.port, where)
            host.vars.update(variables)
            members[name] = None

    def all_host_vars(self) -> dict[str, dict[str, Setting]]:
        """Each host's variables after precedence: `all`, then its groups from the
        shallowest to the deepest (by name within a depth), then the host's own."""
        depths = self._depths()
        groups_of: dict[str, list[str]] = {name: [] for name in self.hosts}
        for group in sorted(self.groups, key=lambda g: (depths.get(g, 1), g)):
            for name in self.members(group):
                groups_of[name].append(group)
        merged: dict[str, dict[str, Setting]] = {}
        for name, chain in groups_of.items():
            merged[name] = {}
            for group in chain:
                merged[name].update(self.groups[group].vars)
            merged[name].update(self.hosts[name].vars)
        return merged

    def members(self, group: str) -> list[str]:
        """The hosts of a group and of its children, in order of appearance; each
        group is walked once (a group reached twice adds nothing new)."""
        if group == "all":
            return list(self.hosts)
        found: dict[str, None] = {}
        walked: set[str] = set()

        def walk(name: str) -> None:
            walked.add(name)
            found.update(self.groups[name].hosts)
            for child in self.groups[name].children:
                if child not in walked:
                    walk(child)

        walk(group)
        return list(found)

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


@dataclass(frozen=True)
class HostRange:
    """`[START:END:STEP]` of numbers (zero-padded as START is) or of single letters."""

    items: range
    letters: bool
    width: int

    @property
    def size(self) -> int:
        """len(items), by arithmetic: len() of a range past sys.maxsize overflows."""
        return (self.items.stop - self.items.start - 1) // self.items.step + 1

    def __iter__(self) -> Iterator[str]:
        for n in self.items:
            yield string.ascii_letters[n] if self.letters else str(n).zfill(self.width)


@dataclass(frozen=True)
class HostPattern:
    """A host line's name: literal text and ranges, in order, and a port."""

    parts: tuple[str | HostRange, ...]
    port: int | None

    @property
    def size(self) -> int:
        """How many names it expands to, without expanding it."""
        return math.prod(p.size for p in self.parts if isinstance(p, HostRange))

    def names(self) -> Iterator[str]:
        choices = [[p] if isinstance(p, str) else p for p in self.parts]
        return ("".join(chosen) for chosen in itertools.product(*choices))


def parse_pattern(pattern: str, where: str) -> HostPattern:
    """A host pattern read, each range checked, nothing expanded. Ranges are those of
    the pattern as written (as Ansible's `expand_hostname_range` reads them): text an
    expansion makes is never read as a range again."""
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
        return HostPattern((name,), port)
    parts: list[str | HostRange] = []
    position = 0
    for found in RANGE.finditer(name):
        parts += [name[position : found.start()], _range(found, where)]
        position = found.end()
    return HostPattern((*parts, name[position:]), port)


def _range(found: re.Match[str], where: str) -> HostRange:
    start, end, step_text = found.groups()
    step = int(step_text or 1)
    if step < 1:
        raise InputError(f"{where}: host range {found.group(0)}: the step must be at least 1")
    if start.isdigit() and end.isdigit():
        if int(start) > int(end):
            raise InputError(f"{where}: host range {found.group(0)}: not a usable range")
        width = len(start) if start.startswith("0") else 0
        return HostRange(range(int(start), int(end) + 1, step), False, width)
    letters = string.ascii_letters
    if len(start) == len(end) == 1 and start in letters and end in letters:
        if letters.index(start) > letters.index(end):
            raise InputError(f"{where}: host range {found.group(0)}: starts after it ends")
        return HostRange(range(letters.index(start), letters.index(end) + 1, step), True, 0)
    raise InputError(
        f"{where}: host range {found.group(0)}: expected [START:END] of numbers or "
        "of single letters"
    )


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
