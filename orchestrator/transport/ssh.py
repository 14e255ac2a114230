"""SSH transport over one Fabric connection, reused for every step of a run.

Lifecycle: created closed; the first `run` or `open_stream` connects (strict
host-key checking); `close` ends it. Commands go over fresh exec channels of
the same connection, at most `max_sessions` at once (the rest queue); TCP
streams are direct-tcpip channels, which sshd does not count as sessions, so
the control machine needs no route to the target's ports. At most
`MAX_STREAMS` of them are open at once (the rest wait within their own time).

A `timeout` is the total time of a command. A lost connection is noticed
within seconds, not at the end of it: keepalives keep traffic flowing, a
connection paramiko has seen die fails the command at once, and a command
that has been silent for a while makes the transport ask the server for an
answer, as OpenSSH's ServerAliveInterval does; no answer ends the connection.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import fabric
import paramiko
import tenacity
from paramiko.ssh_exception import NoValidConnectionsError

from orchestrator.errors import (
    HostKeyError,
    ServiceUnavailable,
    StreamsBusy,
    SudoRefused,
    TransportError,
    Unreachable,
)
from orchestrator.transport import become
from orchestrator.transport.base import Result, Stream
from orchestrator.transport.hostkeys import (
    AcceptNewHostKey,
    RefuseUnknownHostKey,
    fingerprint,
    known_hosts_name,
)
from orchestrator.transport.login import Login, parse_jump
from orchestrator.transport.sessions import DEFAULT_MAX_SESSIONS, SessionSlots

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
CONNECT_TIMEOUT = 10
SESSION_REFUSED_PATIENCE = 30.0
# A host that closes the connection during the handshake (sshd's MaxStartups drops under a
# burst of connections) is asked again this many times: nothing had run yet.
HANDSHAKE_ATTEMPTS = 3
MAX_STREAMS = 64
"""Forwarded streams (gate probes, health checks) open at once on one connection: the
host's sshd serves every channel of a connection in one process, and with 256 at once
(16 containers' concurrent gate phases) it left keepalives unanswered past their 5 s."""
# Paramiko logs refused channels itself; they reach the user as our own errors.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
CHUNK = 1 << 16
SEND_POLL_SECONDS = 0.005
"""How often a stream whose send window is full looks again."""
KEEPALIVE_SECONDS = 5
STALL_SECONDS = 5.0
"""A command silent this long makes the transport check that the server still answers."""
ANSWER_SECONDS = 15.0
"""How long a server may take to answer before its connection is given up: three
keepalive intervals, as OpenSSH gives up after ServerAliveCountMax unanswered ones (3 by
default: 9.2p1 `readconf.c:2592`). A busy host, or a busy control machine
whose SSH reader thread waits for a core, answers late; giving up on a connection fails
every step on it at once (16 containers of one host under load did so at 5 s)."""
LOST_HINT = (
    "the host or the network went away mid-step; what the step did on the target is "
    "unknown: check with `orch status`, then run again"
)


def command_line(argv: Sequence[str], has_input: bool) -> str:
    """What the login shell runs for argv, quoted once: the command never ends before
    the input orch sends it.

    sshd closes a session as soon as its command exits, and a message on that channel
    arriving after orch's close (paramiko sends an EOF or data from the caller's thread
    while its reader thread answers sshd's close) makes sshd drop the whole connection:
    "packet referred to nonexistent channel" (OpenSSH 9.2p1 `channels.c:3319-3327`, for
    data and EOF at `:3336` and `:3446`), every command and stream on it lost. So a command
    without input reads /dev/null and is sent no EOF; with input, the shell reads what
    the command left unread, up to orch's EOF, before it exits with the command's status.
    """
    line = shlex.join(argv)
    if not has_input:
        return f"{line} </dev/null"
    return f"{line}; status=$?; cat >/dev/null; exit $status"


class ExecRefused(paramiko.SSHException):
    """sshd answered an exec request with a failure: the command did not run."""


class ConnectionLost(Exception):
    """The SSH connection died or stopped answering while a command ran."""


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


def no_delay(transport: paramiko.Transport) -> None:
    """Every SSH packet sent at once (TCP_NODELAY), as orch's commands and requests are
    small and each waits for its answer. paramiko 5.1 leaves Nagle's algorithm on (it
    sets no TCP_NODELAY anywhere), so a small packet sent before the last one was
    acknowledged waits for the peer's delayed ACK: about 44 ms per command on this lab's
    OpenSSH 9.2p1 (49 ms a `/bin/true` with it on, 4 ms off; benchmarks/fleet.py). Through
    a jump host the login's socket is a channel, which has no such option."""
    if isinstance(transport.sock, socket.socket):
        transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class SshTransport:
    def __init__(
        self,
        label: str,
        address: str,
        settings: Login,
        accept_new_host_keys: bool = False,
    ) -> None:
        self.label = label
        self.address = address
        self.settings = settings
        self.sessions = SessionSlots(settings.max_sessions or DEFAULT_MAX_SESSIONS)
        self.streams = threading.BoundedSemaphore(MAX_STREAMS)
        self._opening = threading.Lock()
        self._asking = threading.Lock()
        # connect_timeout bounds only the TCP connect; a frozen sshd accepts and then says
        # nothing, so the banner and authentication get the same bound.
        connect_kwargs: dict[str, object] = {
            "banner_timeout": CONNECT_TIMEOUT,
            "auth_timeout": CONNECT_TIMEOUT,
        }
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

    def connect(self) -> None:
        """Log in now, as the first command or stream would."""
        self._transport()

    def _transport(self) -> paramiko.Transport:
        with self._opening:  # parallel rollout workers share this connection
            return self._open()

    def _open(self) -> paramiko.Transport:
        if not self.connection.is_connected:
            try:
                self._handshake()
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
                raise Unreachable(
                    self.label,
                    "connect",
                    f"jump host {self.settings.jump} cannot reach "
                    f"{self.address}:{self.connection.port}: {exc.text}",
                    "check the address and port as seen from the jump host",
                ) from None
            except EOFError:
                raise TransportError(
                    self.label,
                    "connect",
                    f"{self._failing_hop()}: the host closed the connection during the "
                    f"handshake, {HANDSHAKE_ATTEMPTS} times",
                    "its sshd may be dropping connections (MaxStartups) or failing to start "
                    "a session: check its log, then run again",
                ) from None
            except (paramiko.SSHException, OSError) as exc:
                reason, hint = connect_failure(exc)
                failure = Unreachable if isinstance(exc, OSError) else TransportError
                raise failure(
                    self.label, "connect", f"{self._failing_hop()}: {reason}", hint
                ) from None
        transport = self.connection.transport
        assert transport is not None
        transport.set_keepalive(KEEPALIVE_SECONDS)
        return transport

    def _handshake(self) -> None:
        """Open the connection. paramiko raises a bare EOFError when the host closes it
        during key exchange (paramiko 5.1 `Transport.start_client` re-raises what its
        reader thread saved, transport.py:704-706 and 2148-2150); nothing has run then, so
        the open is tried again."""
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(EOFError),
            wait=tenacity.wait_exponential(multiplier=0.2, max=1.0),
            stop=tenacity.stop_after_attempt(HANDSHAKE_ATTEMPTS),
            reraise=True,
        )
        retrying(self.connection.open)
        for connection in (self.gateway, self.connection):
            if connection is not None and connection.transport is not None:
                no_delay(connection.transport)

    def _answers(self, transport: paramiko.Transport) -> bool:
        """Whether the server answers a request within ANSWER_SECONDS.

        paramiko's own keepalive asks for no reply, so it cannot see a peer that
        stopped answering; this asks for one, like OpenSSH's ServerAliveInterval
        (`keepalive@openssh.com`, which servers refuse, and refusing is an answer).
        paramiko waits for the reply without a bound, hence the thread. A connection
        that does not answer is closed, which also ends that wait.
        """
        with self._asking:  # paramiko keeps one pending global request at a time
            answered = threading.Event()

            def ask() -> None:
                transport.global_request("keepalive@openssh.com", wait=True)
                answered.set()

            threading.Thread(target=ask, daemon=True).start()
            alive = answered.wait(ANSWER_SECONDS) and transport.is_active()
        if not alive:
            self.close()
        return alive

    def _session(self, transport: paramiko.Transport, timeout: float | None) -> paramiko.Channel:
        """A new session channel; one that cannot be opened on a server that no longer
        answers is a lost connection, not a slow host."""
        try:
            return transport.open_session(timeout=min(30, timeout or 30))
        except paramiko.SSHException:
            if not self._answers(transport):
                raise ConnectionLost(
                    "the server did not answer when a channel was opened"
                ) from None
            raise

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        """Run argv through the remote login shell (under sudo with `become`), quoted once here."""
        settings = self.settings
        sent = become.sudo_argv(argv, settings.become_user) if settings.become else argv
        command = command_line(sent, bool(stdin))
        step = f"running {argv[0]}"
        try:
            with self.sessions.held():  # the timeout starts once a session slot is ours
                transport = self._transport()
                channel = self._start(transport, command, step, timeout)
                try:
                    stdout, stderr = _exchange(
                        channel, stdin or b"", timeout, lambda: self._answers(transport)
                    )
                    result = Result(tuple(argv), channel.recv_exit_status(), stdout, stderr)
                finally:
                    channel.close()  # before the slot is free again
        except ConnectionLost as exc:
            raise TransportError(self.label, step, f"connection lost: {exc}", LOST_HINT) from None
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
        refused = become.refusal(result, settings.user, settings.become_user)
        if settings.become and refused:
            raise SudoRefused(self.label, step, *refused)
        return result

    def _refused(self, exc: BaseException) -> bool:
        """sshd refused an open (`no more sessions`, or a refused connect), as paramiko
        tells it: a ChannelException, or, when several opens fail at once, "Unable to
        open channel." on a live connection: paramiko keeps one failure reason per
        connection (`saved_exception`), and a concurrent failed open may have taken it."""
        if isinstance(exc, paramiko.ChannelException):
            return exc.code == paramiko.common.OPEN_FAILED_CONNECT_FAILED
        transport = self.connection.transport
        return (
            isinstance(exc, paramiko.SSHException)
            and str(exc) == "Unable to open channel."
            and transport is not None
            and transport.is_active()
        )

    def _start(
        self, transport: paramiko.Transport, command: str, step: str, timeout: float | None
    ) -> paramiko.Channel:
        """A session channel running `command`. What the command never reached is tried
        again for a while: a refused open (sshd frees a closed session only after reading
        its close, and a host may allow fewer than the cap), and a refused exec request
        (sshd could not make the pipes or fork: session.c `do_exec`; paramiko says
        "Channel closed.")."""

        def attempt() -> paramiko.Channel:
            channel = self._session(transport, timeout)
            try:
                channel.exec_command(command)
            except paramiko.SSHException as exc:
                channel.close()
                if transport.is_active():
                    raise ExecRefused(str(exc)) from None
                raise
            return channel

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(
                lambda exc: isinstance(exc, ExecRefused) or self._refused(exc)
            ),
            wait=tenacity.wait_exponential(multiplier=0.02, max=1.0),
            stop=tenacity.stop_after_delay(SESSION_REFUSED_PATIENCE),
            before_sleep=lambda _: self.sessions.refused(),
            reraise=True,
        )
        patience = f"{SESSION_REFUSED_PATIENCE:.0f} s"
        try:
            return retrying(attempt)
        except ExecRefused as exc:
            raise TransportError(
                self.label,
                step,
                f"the host could not start the command for {patience}: {exc}",
                "its sshd could not create a process (process or file limits, memory): "
                "check the host's load",
            ) from None
        except paramiko.SSHException as exc:
            if not self._refused(exc):
                raise
            raise TransportError(
                self.label,
                step,
                f"the host refused a session channel for {patience}: {exc}",
                f"its sshd allows fewer than {self.sessions.limit} sessions per connection "
                "(MaxSessions): set max_sessions for this host in the inventory",
            ) from None

    def stream_free(self) -> bool:
        """Whether a stream would open now without waiting for a slot (a look: another
        thread may take the slot first, and that open then waits)."""
        if not self.streams.acquire(blocking=False):
            return False
        self.streams.release()
        return True

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> Stream:
        """A direct-tcpip channel from the host to address:port, once one of the
        connection's MAX_STREAMS is free (waited for within `timeout`)."""
        started = time.monotonic()
        if not self.streams.acquire(timeout=timeout):
            raise StreamsBusy(
                self.label,
                f"connecting to {address}:{port}",
                f"all {MAX_STREAMS} streams of the connection stayed busy for {timeout:.0f} s",
            )
        try:
            channel = self._open_channel(address, port, timeout - (time.monotonic() - started))
        except BaseException:
            self.streams.release()
            raise
        return _SlotChannel(channel, self.streams)

    def _open_channel(self, address: str, port: int, timeout: float) -> paramiko.Channel:
        timeout = max(timeout, 1.0)  # what waiting for a stream left, with a last second
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
            if self._refused(exc):
                raise ServiceUnavailable(
                    self.label, f"connecting to {address}:{port}", "connection refused"
                ) from None
            raise TransportError(
                self.label,
                f"connecting to {address}:{port}",
                str(exc),
                "check that the host allows TCP forwarding",
            ) from None
        channel.settimeout(timeout)
        return channel


class _SlotChannel:
    """A forwarded channel holding one of its connection's stream slots until closed.

    It is closed from other threads (a gate cancelling its requests) while its own
    thread may be sending: each piece of data goes out under the lock `close` takes,
    so no data follows the channel's close, which sshd would answer by dropping the
    connection (see `command_line`)."""

    def __init__(self, channel: paramiko.Channel, slots: threading.BoundedSemaphore) -> None:
        self.channel, self._slots = channel, slots
        self._closing = threading.Lock()
        self._held = True

    def sendall(self, data: bytes) -> None:
        """All of data, a window's worth at a time, never waiting for window space
        under the lock (within the channel's timeout)."""
        timeout = self.channel.gettimeout()
        deadline = None if timeout is None else time.monotonic() + timeout
        while data:
            with self._closing:
                if not self._held:
                    raise OSError("the stream was closed")
                if self.channel.send_ready():
                    data = data[self.channel.send(data) :]
                    continue
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("no window to send within the stream's timeout")
            time.sleep(SEND_POLL_SECONDS)

    def recv(self, size: int) -> bytes:
        return self.channel.recv(size)

    def settimeout(self, timeout: float | None) -> None:
        self.channel.settimeout(timeout)

    def close(self) -> None:
        """Closed, and its slot given back, whatever the connection's state: closing a
        channel sends a message, which paramiko raises EOFError for once the connection
        under it is gone (nothing is left to close then)."""
        with self._closing:
            held, self._held = self._held, False
            with contextlib.suppress(EOFError, OSError, paramiko.SSHException):
                self.channel.close()
        if held:
            self._slots.release()

    def __getattr__(self, name: str) -> object:
        return getattr(self.channel, name)  # the rest of paramiko's Channel (makefile, ...)


def _exchange(
    channel: paramiko.Channel,
    stdin: bytes,
    timeout: float | None,
    answers: Callable[[], bool],
) -> tuple[bytes, bytes]:
    """Send stdin while reading stdout and stderr, until the command exits.

    Interleaving matters: a command that answers before it has read all its
    input would otherwise fill the SSH windows both ways and never finish.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    stdout, stderr = bytearray(), bytearray()
    sent = 0
    moved = time.monotonic()
    while True:
        before = (sent, len(stdout), len(stderr))
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
        if channel.closed or not channel.get_transport().is_active():
            raise ConnectionLost("the connection closed before the command finished")
        now = time.monotonic()
        if deadline is not None and now > deadline:
            raise TimeoutError
        if (sent, len(stdout), len(stderr)) != before:
            moved = now
        elif now - moved > STALL_SECONDS:
            if not answers():
                raise ConnectionLost(
                    f"the server did not answer for {now - moved + ANSWER_SECONDS:.0f} s"
                )
            moved = time.monotonic()
        # The channel's fd signals incoming data only: poll briefly while input is pending.
        longest = 0.01 if sent < len(stdin) else 1.0
        wait = longest if deadline is None else max(0.0, min(longest, deadline - time.monotonic()))
        select.select([channel], [], [], wait)
    return bytes(stdout), bytes(stderr)
