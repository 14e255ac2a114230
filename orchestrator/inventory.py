"""Inventories: Proxmox hosts, their LXC containers, and groups of containers.

A container is reached either through its host (`pct exec`) or by SSH at its
own address. Settings left out fall back to the container's SSH block, then
the host, then `defaults`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field

from orchestrator import patterns as host_patterns
from orchestrator.errors import InputError
from orchestrator.schema import Name, Port, Schema, validate_document
from orchestrator.transport.login import JUMP
from orchestrator.transport.startups import STARTUPS
from orchestrator.yamlsource import YamlDocument, load_yaml_file, places

VMID_RANGE = (100, 999_999_999)


def _vmid(value: int) -> int:
    low, high = VMID_RANGE
    if not low <= value <= high:
        raise ValueError(f"{value} is not a valid Proxmox VMID ({low}..{high})")
    return value


def _address(value: str) -> str:
    if not value or not all(c.isalnum() or c in ".-:_[]" for c in value):
        raise ValueError(f"{value!r} is not a host name or IP address")
    return value


PATH_MAX = 4095
"""Linux's PATH_MAX (4096) less its NUL: a longer path reaches no file on a container."""


def _path(value: str) -> str:
    if not value.startswith(("/", "~")):
        raise ValueError(f"{value!r} must be an absolute path (or start with ~)")
    if any(c in value for c in "\n\r\0"):
        raise ValueError(f"{value!r} contains a line break or NUL")
    if len(value.encode()) > PATH_MAX:
        raise ValueError(
            f"a path of {len(value.encode())} bytes: at most {PATH_MAX} (Linux PATH_MAX)"
        )
    return value


def _jump(value: str) -> str:
    found = JUMP.match(value)
    if not found or not 1 <= int(found.group(3) or 22) <= 65535:
        raise ValueError(f"{value!r} is not a jump host: expected [user@]host[:port]")
    return value


Address = Annotated[str, AfterValidator(_address)]
UserName = Annotated[str, Field(pattern=r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,31}$")]
Jump = Annotated[str, AfterValidator(_jump)]
PathStr = Annotated[str, AfterValidator(_path)]
Vmid = Annotated[int, AfterValidator(_vmid)]


class SshSettings(Schema):
    """How to log in somewhere; unset fields fall back to outer settings."""

    user: str | None = Field(
        default=None,
        description="Login user. Unset: the outer setting, else `~/.ssh/config`, else your "
        "local user name.",
    )
    port: Port | None = Field(
        default=None,
        description="SSH port. Unset: the outer setting, else `~/.ssh/config`, else 22.",
    )
    identity_file: PathStr | None = Field(
        default=None,
        description="Private key file on the control machine. Unset: the outer setting, "
        "else the SSH agent and your default keys.",
    )
    known_hosts: PathStr | None = Field(
        default=None,
        description="known_hosts file the host keys are checked against "
        "(default `~/.ssh/known_hosts`). Unknown keys are refused unless "
        "`--accept-new-host-keys` records them; changed keys are always refused.",
    )
    max_sessions: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="Commands at once over one connection: the sshd's MaxSessions (default "
        "10, OpenSSH's); more wait their turn.",
    )
    max_startups: Annotated[str, Field(pattern=STARTUPS.pattern)] | None = Field(
        default=None,
        description="The sshd's MaxStartups, `start[:rate:full]` (default 10:30:100, "
        "OpenSSH's). While commands queue on a connection, a run opens another to the "
        "same place, one at a time, up to half of `start` connections.",
    )
    become: Literal["sudo"] | None = Field(
        default=None,
        description="Run every command through `sudo -n -u become_user` (for a login that "
        "is not root; sudo must not ask for a password).",
    )
    become_user: UserName | None = Field(
        default=None, description="The user `become` runs commands as (default root)."
    )
    jump: Jump | None = Field(
        default=None,
        description="Reach the login through this SSH host (`[user@]host[:port]`), as "
        "`ssh -J` does; its host key is checked the same way.",
    )


class Vars(Schema):
    """Values for playbook fields (`{{ vars.NAME }}`); free-form, but those orch itself
    reads are absolute paths."""

    model_config = ConfigDict(extra="allow")
    models_dir: PathStr | None = Field(
        default=None, description="Where the models are, for playbooks' `{{ vars.models_dir }}`."
    )
    state_dir: PathStr | None = Field(
        default=None,
        description="Where orch keeps its deployments, for the playbooks' default `state_dir`.",
    )
    vllm: PathStr | None = Field(
        default=None, description="The vLLM executable, for the playbooks' default `server.vllm`."
    )
    nvidia_smi: PathStr | None = Field(
        default=None,
        description="nvidia-smi inside the container, for preflight's and doctor's GPU "
        "checks (default `/usr/bin/nvidia-smi`).",
    )


class Defaults(SshSettings):
    """Settings for every host and container that does not set its own."""

    pct_path: PathStr = Field(
        default="/usr/sbin/pct", description="The `pct` command on the Proxmox hosts."
    )
    vars: Vars = Field(default=Vars(), description="Variables for every container.")


class Host(SshSettings):
    """A Proxmox VE node, reached by SSH. `orch inventory discover` writes one per node
    of the cluster, with `jump` set to the node it began at for a node that answered
    only through that one."""

    address: Address = Field(description="The node's SSH address: a host name or IP.")
    pct_path: PathStr | None = Field(
        default=None, description="The `pct` command on this node (default: `defaults.pct_path`)."
    )


class DirectSsh(SshSettings):
    """The login of a container reached by its own sshd (`access: ssh`)."""

    address: Address | None = Field(
        default=None, description="Its SSH address (default: the container's `address`)."
    )


class Gpu(Schema):
    """A GPU passed through to the container, as `nvidia-smi` names it."""

    name: str = Field(description="The GPU's model, e.g. `NVIDIA RTX A6000`.")
    memory_mib: Annotated[int, Field(gt=0, le=1 << 24)] = Field(
        description="Its memory in MiB. For people: preflight reads free memory from "
        "nvidia-smi itself; `orch doctor` compares the number of GPUs listed with what "
        "nvidia-smi sees."
    )


class Container(Schema):
    """An LXC container on a host, where a vLLM server runs."""

    vmid: Vmid = Field(
        description="Its Proxmox VMID (100..999999999), as `pct exec VMID` takes it; unique "
        "per host."
    )
    host: Name = Field(description="The `hosts` entry of the node it runs on.")
    address: Address = Field(
        description="Where its server is reached (readiness, gate probes, `/metrics`), and "
        "its SSH address with `access: ssh` unless `ssh.address` is set."
    )
    access: Literal["pct", "ssh"] = Field(
        default="pct",
        description="How commands reach it: `pct` through its host's SSH login "
        "(`pct exec VMID --`), or `ssh` to its own sshd.",
    )
    ssh: DirectSsh | None = Field(
        default=None,
        description="Its own login, for `access: ssh` only; unset fields fall back to the "
        "host, then `defaults`.",
    )
    gpus: list[Gpu] = Field(default=[], description="The GPUs passed through to it.")
    vars: Vars = Field(default=Vars(), description="Its variables, over `defaults.vars`.")


class Inventory(Schema):
    """Proxmox hosts, their LXC containers, and groups of containers."""

    defaults: Defaults = Defaults()
    hosts: dict[Name, Host] = Field(description="The Proxmox VE nodes, by name.")
    containers: dict[Name, Container] = Field(description="The containers, by name.")
    groups: dict[Name, list[Name]] = Field(
        default={},
        description="Named lists of containers, for playbooks' `targets` and `--limit`.",
    )
    source: str = Field(default="", exclude=True)
    places: dict[str, str] = Field(
        default={}, exclude=True, description="Where each key stands, by its dotted path."
    )
    identity_files: dict[str, str] = Field(
        default={},
        exclude=True,
        description="Where each `identity_file` setting stands (`file:line:col`), by its "
        "dotted field.",
    )

    def select(self, patterns: Iterable[str], given_as: str) -> list[str]:
        """Container names matching Ansible-style patterns (`patterns.py`), in inventory
        order, no repeats; `given_as` names where the patterns came from (`--limit`)."""
        ordered = host_patterns.items(patterns, given_as)
        plain = [self._matching(item) for item in ordered if item.role == "include"]
        chosen = set().union(*plain) if plain else set(self.containers)
        for item in ordered:
            if item.role == "intersect":
                chosen &= self._matching(item)
            elif item.role == "exclude":
                chosen -= self._matching(item)
        return [name for name in self.containers if name in chosen]

    def _matching(self, item: host_patterns.Item) -> set[str]:
        """Containers named by one item: a container, a group, or a glob or regular
        expression over either."""
        names = {name for name in self.containers if item.matches(name)}
        for group in (g for g in self.groups if item.matches(g)):
            names.update(self.groups[group])
        if not names:
            raise InputError(
                f"{self.source}: no container or group matches {item.text!r} "
                f"(containers: {', '.join(self.containers)}; groups: {', '.join(self.groups)})"
            )
        return names

    def login(self, container_name: str) -> tuple[str, SshSettings, str]:
        """(address, settings, label) of the SSH endpoint that reaches a container.

        `pct` containers are reached through their host; `ssh` containers directly.
        """
        container = self.containers[container_name]
        host = self.hosts[container.host]
        if container.access == "ssh":
            direct = container.ssh or DirectSsh()
            return (
                direct.address or container.address,
                _merge(direct, _merge(host, self.defaults)),
                container_name,
            )
        return host.address, _merge(host, self.defaults), container.host

    def identity_file_field(self, container_name: str) -> str | None:
        """The dotted field that sets the identity file used to reach a container."""
        container = self.containers[container_name]
        layers = [f"hosts.{container.host}", "defaults"]
        if container.access == "ssh":
            layers.insert(0, f"containers.{container_name}.ssh")
        return next(
            (
                f"{layer}.identity_file"
                for layer in layers
                if f"{layer}.identity_file" in self.identity_files
            ),
            None,
        )

    def pct_path(self, host_name: str) -> str:
        return self.hosts[host_name].pct_path or self.defaults.pct_path

    def vars_place(self, container_name: str) -> str:
        """Where a var of this container is set, in words with file:line:col: its own
        `vars`, else the container, and `defaults.vars` (or where defaults would go)."""
        own = f"containers.{container_name}"
        mine = (
            f"{own}.vars ({self.places[own + '.vars']})"
            if own + ".vars" in self.places
            else f"{own}.vars ({own} is at {self.places.get(own, self.source)})"
        )
        default = (
            f"defaults.vars ({self.places['defaults.vars']})"
            if "defaults.vars" in self.places
            else f"defaults.vars ({self.places['defaults']})"
            if "defaults" in self.places
            else "a top-level defaults.vars"
        )
        return f"under {mine}, or for every container under {default}"

    def container_vars(self, container_name: str) -> dict[str, Any]:
        own = self.containers[container_name].vars
        return {
            **self.defaults.vars.model_dump(exclude_none=True),
            **own.model_dump(exclude_none=True),
        }


def _merge(first: SshSettings, fallback: SshSettings) -> SshSettings:
    return SshSettings(
        **{
            f: getattr(first, f) if getattr(first, f) is not None else getattr(fallback, f)
            for f in SshSettings.model_fields
        }
    )


def load_inventory(path: Path) -> Inventory:
    """Load and validate an inventory file; errors point at file:line:col."""
    return inventory_from_document(load_yaml_file(path))


def inventory_from_document(document: YamlDocument) -> Inventory:
    """Validate a parsed inventory: its schema, then the names it refers to."""
    inventory = validate_document(Inventory, document).model_copy(
        update={
            "source": document.source,
            "places": places(document),
            "identity_files": _identity_file_positions(document),
        }
    )
    _check_references(inventory, document)
    return inventory


def _identity_file_positions(document: YamlDocument) -> dict[str, str]:
    return {
        ".".join(map(str, loc)): document.where(loc)
        for loc in document.positions
        if loc and loc[-1] == "identity_file"
    }


def _check_references(inventory: Inventory, document: YamlDocument) -> None:
    problems = []
    for name, container in inventory.containers.items():
        loc: tuple[str | int, ...] = ("containers", name, "host")
        if container.host not in inventory.hosts:
            problems.append(
                f"{document.where(loc)}: containers.{name}.host: unknown host {container.host!r}"
            )
        if container.access == "pct" and container.ssh is not None:
            loc = ("containers", name, "ssh")
            problems.append(f"{document.where(loc)}: containers.{name}.ssh: only for access 'ssh'")
    seen_vmids: dict[tuple[str, int], str] = {}
    for name, container in inventory.containers.items():
        other = seen_vmids.setdefault((container.host, container.vmid), name)
        if other != name:
            loc = ("containers", name, "vmid")
            problems.append(
                f"{document.where(loc)}: containers.{name}.vmid: "
                f"{container.vmid} is already used by {other} on {container.host}"
            )
    for group, members in inventory.groups.items():
        if group in inventory.containers:
            problems.append(
                f"{document.where(('groups', group))}: groups.{group}: "
                "a container has the same name"
            )
        for index, member in enumerate(members):
            if member not in inventory.containers:
                loc = ("groups", group, index)
                problems.append(
                    f"{document.where(loc)}: groups.{group}[{index}]: unknown container {member!r}"
                )
    if problems:
        raise InputError("\n".join(problems))
