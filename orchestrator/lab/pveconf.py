"""The lab's `/etc/pve/lxc/VMID.conf`: read, merged and printed as Proxmox VE does it.

The lab keeps each container's configuration in the file format Proxmox writes
(pve-container `src/PVE/LXC/Config.pm` `write_pct_config`): the current section,
then `[pve:pending]` (changes that apply at the next start, with `delete:`), then
snapshot sections. `pct config` prints the pending changes merged in unless
`--current` (pve-guest-common `AbstractConfig.pm` `load_current_config`).
Sources with line numbers: docs/field-notes/proxmox.md ("`pct config VMID`"). The
stand-ins read it here, never through orch's own parsers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

LXC_LINE = re.compile(r"^(lxc\.[a-z0-9_\-.]+)(:|\s*=)\s*(.*?)\s*$")
KEY_LINE = re.compile(r"^([a-z][a-z_]*\d*):\s*(.+?)\s*$")
SECTION = re.compile(r"^\[([a-z][a-z0-9_\-]+)\]\s*$", re.IGNORECASE)
PENDING = re.compile(r"^\[pve:pending\]\s*$", re.IGNORECASE)
# PVE::ParseUtils::encode_text: everything but printable ASCII other than ':' and '%'.
SAFE_TEXT = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in ":%")


@dataclass
class Section:
    """One section of the file: `key: value` options, raw `lxc.*` lines in file order."""

    options: dict[str, str] = field(default_factory=dict)
    lxc: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Conf:
    current: Section = field(default_factory=Section)
    pending: Section = field(default_factory=Section)
    snapshots: dict[str, Section] = field(default_factory=dict)


def parse(text: str) -> Conf:
    """parse_pct_config (Config.pm), lenient as without `strict`: odd lines are skipped."""
    conf = Conf()
    section, description = conf.current, ""
    for line in text.split("\n"):
        if not line.strip():
            continue
        snapshot = SECTION.match(line)
        if PENDING.match(line) or snapshot:
            if description:
                section.options["description"] = description
            description = ""
            if snapshot is None:
                section = conf.pending = Section()
            else:
                section = conf.snapshots.setdefault(snapshot.group(1), Section())
            continue
        if line.startswith("#"):
            description += unquote(line[1:]) + "\n"
        elif lxc := LXC_LINE.match(line):
            section.lxc.append((lxc.group(1), lxc.group(3)))
        elif described := re.match(r"^(description):\s*(.*\S)\s*$", line):
            description += unquote(described.group(2))
        elif deleted := re.match(r"^delete:\s*(.*\S)\s*$", line):
            if section is conf.pending:
                section.options["delete"] = deleted.group(1)
        elif option := KEY_LINE.match(line):
            section.options[option.group(1)] = option.group(2)
    if description:
        section.options["description"] = description
    return conf


def pending_deletions(value: str | None) -> list[str]:
    """AbstractConfig.pm `parse_pending_delete`: `,` `;` or blanks between keys, `!` forces."""
    if not value:
        return []
    return [entry.lstrip("!") for entry in re.split(r"[\s,;]+", value.strip()) if entry]


def effective(conf: Conf, current: bool) -> Section:
    """AbstractConfig.pm `load_current_config`: the pending values taken in unless `current`."""
    options = dict(conf.current.options)
    if not current:
        options.update({k: v for k, v in conf.pending.options.items() if k != "delete"})
        for key in pending_deletions(conf.pending.options.get("delete")):
            if options.get(key):
                del options[key]
    return Section(options, list(conf.current.lxc))


def applied(conf: Conf) -> Conf:
    """The file after a start: its pending changes made current (pve-container 6.1.10
    `src/PVE/LXC.pm:3128-3134`, `vm_start` runs `vmconfig_apply_pending`)."""
    return Conf(effective(conf, current=False), Section(), conf.snapshots)


def pct_config_text(section: Section) -> str:
    """What `pct config` prints (pct.pm `config`): sorted keys but `digest`/`lxc`, with
    `description` encoded, then the raw `lxc.*` lines in file order."""
    lines = []
    for key in sorted(section.options):
        value = section.options[key]
        if key == "description":
            value = quote(value, safe=SAFE_TEXT)
        lines.append(f"{key}: {value}")
    lines += [f"{key}: {value}" for key, value in section.lxc]
    return "".join(line + "\n" for line in lines)


def _raw(section: Section) -> str:
    description = section.options.get("description", "")
    lines = [f"#{quote(line, safe=SAFE_TEXT)}" for line in description.split("\n") if line]
    lines += [f"{k}: {v}" for k, v in sorted(section.options.items()) if k != "description"]
    lines += [f"{key}: {value}" for key, value in section.lxc]
    return "".join(line + "\n" for line in lines)


def file_text(conf: Conf) -> str:
    """write_pct_config (Config.pm): the current section, `[pve:pending]`, snapshots."""
    text = _raw(conf.current)
    if conf.pending.options or conf.pending.lxc:
        text += "\n[pve:pending]\n" + _raw(conf.pending)
    for name in sorted(conf.snapshots):
        text += f"\n[{name}]\n" + _raw(conf.snapshots[name])
    return text


def is_template(section: Section) -> bool:
    """AbstractConfig.pm `is_template`: `template: 1`."""
    return section.options.get("template", "").strip() == "1"


def network(value: str) -> dict[str, str]:
    """A `netN` value (Config.pm `$netconf_desc`, no default key): `name=eth0,ip=dhcp,...`."""
    return dict(item.partition("=")[::2] for item in value.split(",") if "=" in item)
