"""The connections of one run: one SSH endpoint per Proxmox host (or per directly
reached container), shared by every step and every container of the run (one connection,
more while commands queue on it: transport/endpoint.py), with each
container's transport (pct over its host's SSH, or its own SSH) wrapped so that every
command it runs is bounded on the container too (BoundedTransport) and reaches the
run's log."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pydantic

from orchestrator.container.shell import BoundedTransport
from orchestrator.errors import InputError
from orchestrator.inventory import Inventory, SshSettings
from orchestrator.runlog import RunLog
from orchestrator.secrets import output_hidden
from orchestrator.transport.base import Result, Stream, Transport
from orchestrator.transport.pct import PctTransport

if TYPE_CHECKING:
    from orchestrator.transport.endpoint import SshEndpoint


@pydantic.dataclasses.dataclass(frozen=True)
class ConnectionUsage:
    """One SSH endpoint's use in a run, as its document lists it: the `connections` it
    had, the sessions taken at once at the `peak` (over all of them), `waited` commands
    queued for a session, `refused` opens sshd refused and that were tried again."""

    endpoint: str
    address: str
    connections: int
    max_sessions: int
    peak_sessions: int
    waited: int
    refused: int

    @classmethod
    def of(cls, endpoint: SshEndpoint) -> ConnectionUsage:
        use = endpoint.use()
        return cls(
            endpoint.label,
            endpoint.address,
            endpoint.connections,
            use.limit,
            use.peak,
            use.waited,
            use.refused,
        )


class Pool(Protocol):
    """What an operation connects through: a transport per container, for one run."""

    def container(self, name: str) -> Transport: ...
    def usage(self) -> list[ConnectionUsage]: ...
    def __enter__(self) -> Pool: ...
    def __exit__(self, *exc: object) -> None: ...


Connect = Callable[[Inventory, RunLog | None], Pool]
"""How an operation gets its connections: from the inventory and the run's log (if any).
Operations are given one and never build their own."""


def ssh(accept_new_host_keys: bool = False) -> Connect:
    """Real connections: SSH per the inventory, host keys verified."""

    def connect(inventory: Inventory, run_log: RunLog | None) -> Pool:
        return Connections(inventory, accept_new_host_keys, run_log)

    return connect


SSH = ssh()


class Given:
    """Connections to transports given up front, by container name (in-memory
    containers in unit tests); recorded to the run's log as SSH ones are."""

    def __init__(self, transports: Mapping[str, Transport], run_log: RunLog | None) -> None:
        self.transports, self.run_log = transports, run_log

    @classmethod
    def connect(cls, transports: Mapping[str, Transport]) -> Connect:
        return lambda _inventory, run_log: cls(transports, run_log)

    def container(self, name: str) -> Transport:
        transport = self.transports[name]
        return RecordedTransport(transport, name, self.run_log) if self.run_log else transport

    def usage(self) -> list[ConnectionUsage]:
        return []

    def __enter__(self) -> Given:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class Connections:
    """One SSH endpoint per place orch logs in to, its first connection opened on first
    use, all closed at the end."""

    def __init__(
        self,
        inventory: Inventory,
        accept_new_host_keys: bool = False,
        run_log: RunLog | None = None,
    ) -> None:
        """With `run_log`, every command run through a container's transport is written
        to it (RecordedTransport)."""
        self.inventory = inventory
        self.accept_new_host_keys = accept_new_host_keys
        self.run_log = run_log
        self._ssh: dict[tuple[str, SshSettings], SshEndpoint] = {}
        self._lock = threading.Lock()

    def _endpoint(self, label: str, address: str, settings: SshSettings) -> SshEndpoint:
        """Keyed by where and how it logs in (user, port, jump host, become...), so
        distinct endpoints never share a connection."""
        from orchestrator.transport.endpoint import SshEndpoint  # fabric loads on connecting

        key = (address, settings)
        with self._lock:
            if key not in self._ssh:
                self._ssh[key] = SshEndpoint(label, address, settings, self.accept_new_host_keys)
            return self._ssh[key]

    def container(self, name: str) -> Transport:
        """The transport that runs commands inside container `name`."""
        container = self.inventory.containers[name]
        address, settings, label = self.inventory.login(name)
        if settings.identity_file:
            _check_identity_file(self.inventory, name, settings.identity_file)
        ssh = self._endpoint(label, address, settings)
        transport: Transport = ssh
        if container.access != "ssh":
            pct = self.inventory.pct_path(container.host)
            transport = PctTransport(name, ssh, pct, container.vmid)
        transport = BoundedTransport(transport)
        return RecordedTransport(transport, name, self.run_log) if self.run_log else transport

    def usage(self) -> list[ConnectionUsage]:
        """Per SSH endpoint: where, its connections, each one's session cap, the peak
        reached and how many commands waited for a free session."""
        with self._lock:
            endpoints = list(self._ssh.values())
        return [ConnectionUsage.of(endpoint) for endpoint in endpoints]

    def close(self) -> None:
        with self._lock:
            for transport in self._ssh.values():
                transport.close()
            self._ssh.clear()

    def __enter__(self) -> Connections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_identity_file(inventory: Inventory, container: str, identity_file: str) -> None:
    """A key that cannot be read is the inventory's mistake, not an unreachable host."""
    path = Path(identity_file).expanduser()
    try:
        with path.open("rb"):
            return
    except OSError as exc:
        reason = exc.strerror or str(exc)
    dotted = inventory.identity_file_field(container) or "identity_file"
    where = inventory.identity_files.get(dotted, inventory.source)
    raise InputError(f"{where}: {dotted}: cannot read {path}: {reason}")


class RecordedTransport:
    """Writes every command it runs to the run's log, and changes nothing callers see:
    the same result is returned and the same error raised, after the record is written."""

    def __init__(self, inner: Transport, container: str, log: RunLog) -> None:
        self.inner = inner
        self.label = inner.label
        self.container = container
        self.log = log

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        started = time.monotonic()
        try:
            result = self.inner.run(argv, stdin, timeout)
        except Exception as exc:
            self.log.command(self.container, argv, stdin, time.monotonic() - started, exc)
            raise
        outcome = (result.exit_code, result.stdout, result.stderr)
        seconds = time.monotonic() - started
        self.log.command(self.container, argv, stdin, seconds, outcome, output_hidden())
        return result

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> Stream:
        """Health, metrics and probe traffic: not commands, not recorded."""
        return self.inner.open_stream(address, port, timeout)
