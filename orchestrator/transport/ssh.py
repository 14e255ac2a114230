"""SSH transport over one Fabric connection, reused for every step of a run.

Lifecycle: created closed; the first `run` or `open_stream` connects (strict
host-key checking); `close` ends it. Commands go over fresh exec channels of
the same connection; TCP streams are direct-tcpip channels, so the control
machine needs no route to the target's ports.
"""

from __future__ import annotations

import errno
import logging
import select
import shlex
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import fabric
import paramiko
from paramiko.ssh_exception import NoValidConnectionsError

from orchestrator.errors import (
    HostKeyError,
    ServiceUnavailable,
    SudoRefused,
    TransportError,
)
from orchestrator.inventory import SshSettings, parse_jump
from orchestrator.transport import become
from orchestrator.transport.base import Result
from orchestrator.transport.hostkeys import (
    AcceptNewHostKey,
    RefuseUnknownHostKey,
    fingerprint,
    known_hosts_name,
)

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
CONNECT_TIMEOUT = 10
# Paramiko logs refused channels itself; they reach the user as our own errors.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
CHUNK = 1 << 16


def connect_failure(exc: Exception) -> tuple[str, str]:
    """(reason, hint) for a failed TCP/SSH connect, in the words of `ssh` itself."""
    errors = list(exc.errors.values()) if isinstance(exc, NoValidConnectionsError) else [exc]
    first = errors[0] if errors else exc
    if isinstance(first, ConnectionRefusedError):
        return "connection refused", "the host answers but no sshd listens on that port"
    if isinstance(first, TimeoutError):
        return (
            f"no answer within {CONNECT_TIMEOUT} s",
            "the host is down, or a firewall drops the traffic",
        )
    if isinstance(first, OSError) and first.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "no route to host", "check the address and your network route to it"
    if isinstance(first, socket.gaierror):
        return f"cannot resolve the name: {first.strerror}", "check the address"
    return str(exc), "check the address and port, and that sshd runs there"


class SshTransport:
    def __init__(
        self,
        label: str,
        address: str,
        settings: SshSettings,
        accept_new_host_keys: bool = False,
    ) -> None:
        self.label = label
        self.address = address
        self.settings = settings
        self._opening = threading.Lock()
        connect_kwargs = {}
        if settings.identity_file:
            connect_kwargs["key_filename"] = [str(Path(settings.identity_file).expanduser())]
        self.known_hosts = Path(settings.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()
        self.gateway = None
        if settings.jump:
            jump_user, jump_host, jump_port = parse_jump(settings.jump)
            self.gateway = fabric.Connection(
                host=jump_host,
                user=jump_user or settings.user,
                port=jump_port,
                connect_timeout=CONNECT_TIMEOUT,
                connect_kwargs=connect_kwargs,
            )
            self._verify_host_keys(self.gateway, accept_new_host_keys)
        self.connection = fabric.Connection(
            host=address,
            user=settings.user,
            port=settings.port,
            connect_timeout=CONNECT_TIMEOUT,
            connect_kwargs=connect_kwargs,
            gateway=self.gateway,
        )
        self._verify_host_keys(self.connection, accept_new_host_keys)

    def _verify_host_keys(self, connection: fabric.Connection, accept_new: bool) -> None:
        """The same known_hosts and policy for the login and for its jump host."""
        client = connection.client
        if self.known_hosts.exists():
            client.load_host_keys(str(self.known_hosts))
        policy = AcceptNewHostKey if accept_new else RefuseUnknownHostKey
        client.set_missing_host_key_policy(policy(self.known_hosts))

    def _failing_hop(self) -> str:
        """Where a failed connect stopped: at the jump host, or at the login itself."""
        if self.gateway is not None and not self.gateway.is_connected:
            return f"jump host {self.settings.jump}"
        via = f" through {self.settings.jump}" if self.gateway is not None else ""
        return f"{self.address}:{self.connection.port}{via}"

    def close(self) -> None:
        self.connection.close()
        if self.gateway is not None:
            self.gateway.close()

    def _transport(self) -> paramiko.Transport:
        with self._opening:  # parallel rollout workers share this connection
            return self._open()

    def _open(self) -> paramiko.Transport:
        if not self.connection.is_connected:
            try:
                self.connection.open()
            except HostKeyError as exc:
                reason = f"{self._failing_hop()}: {exc.reason}" if self.gateway else exc.reason
                raise HostKeyError(self.label, exc.step, reason, exc.hint) from None
            except paramiko.BadHostKeyException as exc:
                hop = f"{self._failing_hop()}: " if self.gateway else ""
                raise HostKeyError(
                    self.label,
                    "connect",
                    f"{hop}host key CHANGED: got {fingerprint(exc.key)}, "
                    f"{self.known_hosts} has {fingerprint(exc.expected_key)}",
                    "this may be an attack or a reinstalled host; verify it, then remove the "
                    "old line with: ssh-keygen -R "
                    f"{shlex.quote(known_hosts_name(exc.hostname, self.connection.port))} "
                    f"-f {shlex.quote(str(self.known_hosts))}",
                ) from None
            except paramiko.AuthenticationException as exc:
                raise TransportError(
                    self.label,
                    "connect",
                    f"{self._failing_hop()}: permission denied: {exc}"
                    if self.gateway
                    else f"permission denied as {self.connection.user}: {exc}",
                    "the host refused every key offered: check the inventory's user and "
                    "identity_file, your ssh-agent, and the host's authorized_keys",
                ) from None
            except paramiko.ChannelException as exc:
                raise TransportError(
                    self.label,
                    "connect",
                    f"jump host {self.settings.jump} cannot reach "
                    f"{self.address}:{self.connection.port}: {exc.text}",
                    "check the address and port as seen from the jump host",
                ) from None
            except (paramiko.SSHException, OSError) as exc:
                reason, hint = connect_failure(exc)
                raise TransportError(
                    self.label, "connect", f"{self._failing_hop()}: {reason}", hint
                ) from None
        transport = self.connection.transport
        assert transport is not None
        return transport

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        """Run argv through the remote login shell (under sudo with `become`), quoted once here."""
        settings = self.settings
        sent = become.sudo_argv(argv, settings.become_user) if settings.become else argv
        command = shlex.join(sent)
        step = f"running {argv[0]}"
        channel = None
        try:
            channel = self._transport().open_session(timeout=30)
            channel.exec_command(command)
            stdout, stderr = _exchange(channel, stdin or b"", timeout)
            result = Result(tuple(argv), channel.recv_exit_status(), stdout, stderr)
        except TimeoutError:
            raise TransportError(
                self.label,
                step,
                f"no answer within {timeout} s",
                "the target may be overloaded; try again",
            ) from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(
                self.label,
                step,
                f"SSH channel failed: {exc}",
                "check that the host is up; run again",
            ) from None
        finally:
            if channel is not None:
                channel.close()
        refused = become.refusal(result, settings.user, settings.become_user)
        if settings.become and refused:
            raise SudoRefused(self.label, step, *refused)
        return result

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> paramiko.Channel:
        """A direct-tcpip channel from the host to address:port."""
        try:
            channel = self._transport().open_channel(
                "direct-tcpip", (address, port), ("127.0.0.1", 0), timeout=timeout
            )
        except paramiko.ChannelException as exc:
            if exc.code != paramiko.common.OPEN_FAILED_CONNECT_FAILED:
                raise TransportError(
                    self.label,
                    f"connecting to {address}:{port}",
                    f"the host refused to forward: {exc.text}",
                    "allow TCP forwarding (AllowTcpForwarding) in the host's sshd_config",
                ) from None
            raise ServiceUnavailable(
                self.label, f"connecting to {address}:{port}", exc.text or "connection refused"
            ) from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(
                self.label,
                f"connecting to {address}:{port}",
                str(exc),
                "check that the host allows TCP forwarding",
            ) from None
        channel.settimeout(timeout)
        return channel


def _exchange(
    channel: paramiko.Channel, stdin: bytes, timeout: float | None
) -> tuple[bytes, bytes]:
    """Send stdin while reading stdout and stderr, until the command exits.

    Interleaving matters: a command that answers before it has read all its
    input would otherwise fill the SSH windows both ways and never finish.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    stdout, stderr = bytearray(), bytearray()
    sent = 0
    if not stdin:
        channel.shutdown_write()
    while True:
        while sent < len(stdin) and channel.send_ready():
            sent += channel.send(stdin[sent : sent + CHUNK])
            if sent == len(stdin):
                channel.shutdown_write()
        while channel.recv_ready():
            stdout += channel.recv(CHUNK)
        while channel.recv_stderr_ready():
            stderr += channel.recv_stderr(CHUNK)
        # sshd may send the exit status before output still held back by a full
        # window: done only once the output's EOF has arrived and all of it was read.
        if (
            channel.exit_status_ready()
            and channel.eof_received
            and not (channel.recv_ready() or channel.recv_stderr_ready())
        ):
            break
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError
        # The channel's fd signals incoming data only: poll briefly while input is pending.
        longest = 0.01 if sent < len(stdin) else 1.0
        wait = longest if deadline is None else max(0.0, min(longest, deadline - time.monotonic()))
        select.select([channel], [], [], wait)
    return bytes(stdout), bytes(stderr)
