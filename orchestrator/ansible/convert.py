"""An Ansible inventory mapped onto orch's: Proxmox nodes become `hosts`, LXC
guests become `containers`, groups of containers stay groups, and every variable
that has no place in orch is named with the file:line that set it.

What counts as a container: a host with `proxmox_vmid`, as community.general's
Proxmox inventory plugin (its `proxmox_` prefix) and `proxmox_pct_remote`
connection name it. `proxmox_node` names its node; else, with `proxmox_pct_remote`,
the node is the one at its `ansible_host` (that connection logs into the node and
runs `pct`). Every other host is a Proxmox node.

Pure: an `AnsibleInventory` in, the inventory's text and the notes out. Values
reach the file through `yaml.safe_dump` only, and the result is checked by orch's
own loader before anyone writes it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.ansible.source import AnsibleInventory, AnsibleVars, Setting
from orchestrator.errors import InputError
from orchestrator.inventory import Container, Host, SshSettings, Vars, inventory_from_document
from orchestrator.yamlsource import parse_yaml

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
PCT_CONNECTIONS = ("community.general.proxmox_pct_remote", "proxmox_pct_remote")
SSH_CONNECTIONS = ("ssh", "paramiko", "ansible.builtin.ssh", "ansible.builtin.paramiko_ssh")
LOGIN = {
    "ansible_user": "user",
    "ansible_port": "port",
    "ansible_ssh_private_key_file": "identity_file",
    "ansible_become_user": "become_user",
}
"""Ansible's connection variables and the orch SSH setting each sets."""
CONSUMED = {
    "ansible_host",
    "ansible_connection",
    "ansible_become",
    "ansible_become_method",
    "proxmox_vmid",
    "proxmox_node",
    "proxmox_type",
    *LOGIN,
}
SPECIAL = ("ansible_", "proxmox_")
"""Variables of Ansible and of the Proxmox plugins: never playbook values."""


@dataclass
class Imported:
    """The inventory's text and what could not be mapped."""

    text: str
    notes: list[str]
    hosts: list[str] = field(default_factory=list)
    containers: list[dict[str, Any]] = field(default_factory=list)
    """Each container's entry as written (its name added): the inventory file's own keys."""
    groups: list[str] = field(default_factory=list)


@dataclass
class _Mapping:
    """The inventory being built, and the notes about it."""

    source: AnsibleInventory
    names: dict[str, str] = field(default_factory=dict)
    """Ansible host name -> orch name."""
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each entry as the written file will hold it: orch's `Host` and `Container` fields
    with Ansible's values, kept as plain data for `yaml.safe_dump` and checked by orch's
    own loader (`_valid` per entry, `inventory_from_document` on the whole text)."""
    _notes: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def note(self, where: str, subject: str, what: str) -> None:
        """One note per line and problem: a group variable every host inherits is
        said once, with the hosts it concerns."""
        subjects = self._notes.setdefault((where, what), [])
        if subject not in subjects:
            subjects.append(subject)

    @property
    def notes(self) -> list[str]:
        """`file:line: subjects: what`, in the file's order."""

        def order(item: tuple[tuple[str, str], list[str]]) -> tuple[str, int, str]:
            (where, what), _ = item
            source, _, line = where.rpartition(":")
            return (source, int(line) if line.isdigit() else 0, what)

        return [
            f"{where}: {_subjects(subjects)}: {what}"
            for (where, what), subjects in sorted(self._notes.items(), key=order)
        ]


def _subjects(subjects: list[str]) -> str:
    """`host a`, or `hosts a, b` for several of one kind."""
    kinds = {s.split(" ", 1)[0] for s in subjects}
    if len(subjects) > 1 and len(kinds) == 1:
        return f"{kinds.pop()}s " + ", ".join(s.split(" ", 1)[1] for s in subjects)
    return ", ".join(subjects)


def convert(source: AnsibleInventory, command: str) -> Imported:
    """The orch inventory for an Ansible one (validated by orch's loader)."""
    mapping = _Mapping(source)
    guests = source.all_host_vars()
    nodes = {n: v for n, v in guests.items() if "proxmox_vmid" not in v}
    for name, settings in nodes.items():
        _node(mapping, name, settings)
    for name, settings in guests.items():
        if name not in nodes:
            _container(mapping, name, settings)
    groups = _groups(mapping)
    data = _lift_defaults(mapping.hosts, mapping.containers)
    data["groups"] = groups
    text = _text(data, mapping.notes, command, source.source)
    inventory_from_document(parse_yaml(text, f"the inventory imported from {source.source}"))
    return Imported(
        text,
        mapping.notes,
        list(mapping.hosts),
        [{"name": n, **c} for n, c in mapping.containers.items()],
        list(groups),
    )


def _orch_name(mapping: _Mapping, name: str, where: str) -> str | None:
    """The name as orch takes it (`[A-Za-z0-9][A-Za-z0-9_.-]*`), changed only when it
    must be, and never onto another's."""
    safe = name if NAME.match(name) else re.sub(r"[^A-Za-z0-9_.-]", "-", name).lstrip("_.-")[:63]
    if not safe or safe in mapping.names.values():
        mapping.note(where, f"host {name}", "no usable orch name for it: left out")
        return None
    if safe != name:
        mapping.note(where, f"host {name}", f"named {safe} (orch names take A-Z a-z 0-9 _ . -)")
    mapping.names[name] = safe
    return safe


def _node(mapping: _Mapping, name: str, settings: dict[str, Setting]) -> None:
    where = mapping.source.hosts[name].where
    connection = _text_value(settings.get("ansible_connection"))
    if connection not in (None, *SSH_CONNECTIONS):
        mapping.note(
            where, f"host {name}", f"ansible_connection {connection}: orch reaches nodes by SSH"
        )
    orch_name = _orch_name(mapping, name, where)
    if orch_name is None:
        return
    entry = {"address": _address(mapping, name, settings), **_login(mapping, name, settings)}
    _unmapped(mapping, name, settings, "orch keeps no variables for Proxmox nodes")
    if _valid(mapping, Host, entry, where, f"host {name}"):
        mapping.hosts[orch_name] = entry


def _container(mapping: _Mapping, name: str, settings: dict[str, Setting]) -> None:
    where = mapping.source.hosts[name].where
    subject = f"host {name}"
    kind = _text_value(settings.get("proxmox_type")) or "lxc"
    if kind != "lxc":
        mapping.note(where, subject, f"proxmox_type {kind}: orch manages LXC containers only")
        return
    vmid = settings["proxmox_vmid"]
    try:
        number = int(vmid.value)
    except (TypeError, ValueError):
        mapping.note(vmid.where, subject, f"proxmox_vmid {vmid.value!r} is not a number")
        return
    connection = _text_value(settings.get("ansible_connection"))
    pct = connection in PCT_CONNECTIONS
    if not pct and connection not in (None, *SSH_CONNECTIONS):
        mapping.note(where, subject, f"ansible_connection {connection}: orch uses pct or SSH")
        return
    node = _node_of(mapping, name, settings, pct)
    orch_name = _orch_name(mapping, name, where) if node else None
    if node is None or orch_name is None:
        return
    entry: dict[str, Any] = {"vmid": number, "host": node, "access": "pct" if pct else "ssh"}
    if pct:
        entry["address"] = orch_name
        mapping.note(
            where,
            subject,
            f"reached through its node by pct, its own address is unknown: set "
            f"containers.{orch_name}.address to where its server listens",
        )
        login = _login(mapping, name, settings)
        differing = [f"{k} {v}" for k, v in login.items() if mapping.hosts[node].get(k) != v]
        if differing:
            mapping.note(
                where,
                subject,
                f"not mapped: {', '.join(differing)}: orch runs pct over its node's "
                f"login ({node}'s settings)",
            )
    else:
        entry["address"] = _address(mapping, name, settings)
        login = _login(mapping, name, settings)
        if login:
            entry["ssh"] = login
    own = _unmapped(mapping, name, settings, None)
    if own:
        entry["vars"] = own
    if _valid(mapping, Container, entry, where, subject):
        mapping.containers[orch_name] = entry


def _node_of(mapping: _Mapping, name: str, settings: dict[str, Setting], pct: bool) -> str | None:
    """The orch host a container runs on: `proxmox_node`, else (pct) its ansible_host."""
    where, subject = mapping.source.hosts[name].where, f"host {name}"
    named = settings.get("proxmox_node")
    if named is not None:
        node = mapping.names.get(str(named.value), str(named.value))
        if node not in mapping.hosts:
            if not NAME.match(node):
                mapping.note(named.where, subject, f"proxmox_node {node!r} is not a usable name")
                return None
            mapping.hosts[node] = {"address": node}
            mapping.note(
                named.where,
                f"host {node}",
                "a Proxmox node named by proxmox_node only: its name stands in for its "
                f"address (set hosts.{node}.address)",
            )
        return node
    target = _text_value(settings.get("ansible_host")) if pct else None
    found = [n for n, h in mapping.hosts.items() if target and target in (h["address"], n)]
    if len(found) == 1:
        return found[0]
    mapping.note(
        where,
        subject,
        "its Proxmox node is unknown (set proxmox_node, or ansible_host to a node's address "
        "with the proxmox_pct_remote connection): left out",
    )
    return None


def _address(mapping: _Mapping, name: str, settings: dict[str, Setting]) -> str:
    host = settings.get("ansible_host")
    value = _text_value(host)
    if host is None or value is None or _templated(mapping, host, name, "ansible_host"):
        return name
    return value


def _login(mapping: _Mapping, name: str, settings: dict[str, Setting]) -> dict[str, Any]:
    """orch's SSH settings from Ansible's connection variables."""
    login: dict[str, Any] = {}
    for variable, setting in LOGIN.items():
        found = settings.get(variable)
        if found is None or _templated(mapping, found, name, variable):
            continue
        value = found.value
        if setting == "identity_file" and not str(value).startswith(("/", "~")):
            mapping.note(
                found.where,
                f"host {name}",
                f"{variable} {value!r} is relative (to where ansible runs): write it absolute",
            )
            continue
        login[setting] = value
    become = settings.get("ansible_become")
    if become is not None and _truthy(become.value):
        method = _text_value(settings.get("ansible_become_method")) or "sudo"
        if method == "sudo":
            login["become"] = "sudo"
        else:
            mapping.note(
                become.where, f"host {name}", f"ansible_become_method {method}: orch has sudo only"
            )
    elif "become_user" in login:
        del login["become_user"]  # without become it changes nothing, in Ansible as in orch
    return login


def _unmapped(
    mapping: _Mapping, name: str, settings: dict[str, Setting], refusal: str | None
) -> AnsibleVars:
    """Variables orch does not read as settings: noted, or (refusal None) kept as the
    container's vars when they are playbook values."""
    kept: AnsibleVars = {}
    for variable, setting in settings.items():
        if variable in CONSUMED:
            continue
        if variable.startswith(SPECIAL):
            mapping.note(setting.where, f"host {name}", f"{variable}: not mapped (no orch setting)")
        elif refusal is not None:
            mapping.note(setting.where, f"host {name}", f"{variable}: not mapped ({refusal})")
        elif not _templated(mapping, setting, name, variable):
            kept[variable] = setting.value
    return kept


def _templated(mapping: _Mapping, setting: Setting, name: str, variable: str) -> bool:
    """A value Ansible would render (`{{ ... }}`) cannot be known here: noted."""
    if isinstance(setting.value, str) and "{{" in setting.value:
        mapping.note(
            setting.where, f"host {name}", f"{variable}: a Jinja2 template, not evaluated: left out"
        )
        return True
    return False


def _valid(
    mapping: _Mapping, model: type[BaseModel], entry: dict[str, Any], where: str, subject: str
) -> bool:
    """Whether orch's schema takes the entry; if not, why, at the Ansible file's line."""
    try:
        model.model_validate(entry)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors(include_url=False)
        )
        mapping.note(where, subject, f"left out: {problems}")
        return False
    return True


def _groups(mapping: _Mapping) -> dict[str, list[str]]:
    """Ansible groups as lists of the containers in them (children included)."""
    groups: dict[str, list[str]] = {}
    for name, group in mapping.source.groups.items():
        if name in ("all", "ungrouped"):
            continue
        members = mapping.source.members(name)
        containers = [
            mapping.names[m] for m in members if mapping.names.get(m) in mapping.containers
        ]
        if not containers:
            if members:
                mapping.note(group.where, f"group {name}", "no containers in it: not mapped")
            continue
        if not NAME.match(name) or name in mapping.containers:
            mapping.note(group.where, f"group {name}", "its name is not usable in orch: left out")
            continue
        groups[name] = containers
    return groups


def _lift_defaults(
    hosts: dict[str, dict[str, Any]], containers: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Settings every login shares, and vars every container shares, said once in
    `defaults` (only when all have them: an unset setting must stay unset)."""
    logins = [*hosts.values(), *(c["ssh"] for c in containers.values() if "ssh" in c)]
    ssh_containers = sum(c["access"] == "ssh" for c in containers.values())
    defaults: dict[str, Any] = {}
    if len(logins) == len(hosts) + ssh_containers and logins:
        for setting in SshSettings.model_fields:
            values = [json.dumps(login.get(setting)) for login in logins]
            if setting in logins[0] and len(set(values)) == 1:
                defaults[setting] = logins[0][setting]
                for login in logins:
                    del login[setting]
    for entry in containers.values():
        if "ssh" in entry and not entry["ssh"]:
            del entry["ssh"]
    shared = [c.get("vars", {}) for c in containers.values()]
    if shared and len(containers) > 1:
        common = {
            k: v
            for k, v in shared[0].items()
            if all(k in other and other[k] == v for other in shared[1:])
        }
        if common and _vars_ok(common):
            defaults["vars"] = common
            for entry in containers.values():
                entry["vars"] = {k: v for k, v in entry["vars"].items() if k not in common}
                if not entry["vars"]:
                    del entry["vars"]
    return {"defaults": defaults, "hosts": hosts, "containers": containers}


def _vars_ok(values: AnsibleVars) -> bool:
    try:
        Vars.model_validate(values)
    except ValidationError:
        return False
    return True


def _text(data: dict[str, Any], notes: list[str], command: str, source: str) -> str:
    """The file: where it came from, what did not map (as comments), then the YAML."""
    lines = [
        f"# Written by: {_comment(command)}",
        f"# from {_comment(source)}. Check it, fill in `vars`, then try:",
        "#   orch doctor -i THIS_FILE",
    ]
    if notes:
        lines.append("# Not mapped (also printed when it was written):")
        lines += [f"#   {_comment(note)}" for note in notes]
    if not data["defaults"]:
        del data["defaults"]
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return "\n".join(lines) + "\n" + body


def _comment(text: str) -> str:
    """Text that stays inside one comment line (line breaks and controls escaped)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _text_value(setting: Setting | None) -> str | None:
    return None if setting is None or setting.value is None else str(setting.value)


def _truthy(value: Any) -> bool:
    """Ansible's booleans: true/yes/on/1 in any case."""
    return str(value).strip().lower() in ("true", "yes", "on", "1", "y", "t")


def read(path: str, text: str, kind: str | None = None) -> AnsibleInventory:
    """An INI or YAML inventory; without `kind`, by its extension, else YAML when the
    text is a YAML mapping (as Ansible's yaml plugin requires), else INI."""
    from orchestrator.ansible.ini import parse_ini
    from orchestrator.ansible.source import from_yaml

    suffix = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if kind is None:
        kind = {"yaml": "yaml", "yml": "yaml", "json": "yaml", "ini": "ini"}.get(suffix)
    if kind is None:
        try:
            kind = "yaml" if isinstance(parse_yaml(text, path).data, dict) else "ini"
        except InputError:
            kind = "ini"
    return from_yaml(parse_yaml(text, path)) if kind == "yaml" else parse_ini(text, path)
