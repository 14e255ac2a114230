"""Session channels per SSH connection against the lab's real sshd, which keeps
OpenSSH's default MaxSessions (10) and MaxStartups (10:30:100): commands beyond the cap
get another connection within MaxStartups or queue, and all succeed, the step timeout
starts after the queue, and forwarded streams take no slot."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import paramiko
import pytest
import yaml
from labtools import LabHandle

from orchestrator.errors import TransportError
from orchestrator.inventory import SshSettings, load_inventory
from orchestrator.lab import sshd
from orchestrator.transport import ssh
from orchestrator.transport.base import Result
from orchestrator.transport.endpoint import SshEndpoint
from orchestrator.transport.pct import PctTransport
from orchestrator.transport.ssh import SshTransport

pytestmark = pytest.mark.lab


def pve1_login(lab: LabHandle, tmp_path: Path, **defaults: object) -> tuple[str, SshSettings, str]:
    """How pve1 is logged in to, with inventory `defaults` added (e.g. max_sessions) in a
    copy of the lab's inventory: (address, settings, label)."""
    data = yaml.safe_load(lab.inventory.read_text())
    data["defaults"].update(defaults)
    edited = tmp_path / "inventory.yaml"
    edited.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_inventory(edited).login("ct200")


def host_transport(lab: LabHandle, tmp_path: Path, **defaults: object) -> SshTransport:
    """pve1's SSH connection (see pve1_login)."""
    address, settings, label = pve1_login(lab, tmp_path, **defaults)
    return SshTransport(label, address, settings)


def all_at_once(count: int, command: Callable[[], Result]) -> list[Result | Exception]:
    """Run `command` in `count` threads released together; each result or error."""
    start = threading.Barrier(count)
    outcomes: list[Result | Exception] = [RuntimeError("not run")] * count

    def one(index: int) -> None:
        start.wait()
        try:
            outcomes[index] = command()
        except Exception as exc:  # reported by the assertions
            outcomes[index] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return outcomes


def test_lab_sshd_keeps_openssh_session_limits_unless_raised(tmp_path: Path) -> None:
    paths = (tmp_path / "key", tmp_path / "keys", tmp_path / "pid")
    stock = sshd.sshd_config("127.0.0.1", 2222, *paths)
    assert "MaxSessions" not in stock and "MaxStartups" not in stock
    raised = sshd.sshd_config("127.0.0.1", 2222, *paths, limits=sshd.SessionLimits(50, "40:30:100"))
    assert "MaxSessions 50\n" in raised and "MaxStartups 40:30:100\n" in raised


def test_commands_above_the_cap_queue_and_all_succeed(
    shared_lab: LabHandle, tmp_path: Path
) -> None:
    log = Path(shared_lab.lab.nodes()[0].log)
    logged_before = len(log.read_bytes())
    with contextlib.closing(host_transport(shared_lab, tmp_path)) as host:
        pct = load_inventory(shared_lab.inventory).pct_path("pve1")
        ct200 = PctTransport("ct200", host, pct, 200)
        outcomes = all_at_once(16, lambda: ct200.run(["/bin/sh", "-c", "sleep 2; echo done"]))
        use = host.sessions.use()
    assert [o.text if isinstance(o, Result) else repr(o) for o in outcomes] == ["done\n"] * 16
    assert (use.limit, use.peak) == (10, 10)
    assert use.waited >= 6
    # sshd may refuse an open that follows a close too closely; each was tried again
    refusals = log.read_bytes()[logged_before:].count(b"no more sessions")
    assert use.refused == refusals


def test_the_connection_sends_each_packet_at_once(shared_lab: LabHandle, tmp_path: Path) -> None:
    """TCP_NODELAY on the login's socket: with Nagle's algorithm on (paramiko's default),
    a command's small packets wait for sshd's delayed ACK (benchmarks/fleet.py times it)."""
    with contextlib.closing(host_transport(shared_lab, tmp_path)) as host:
        assert host.run(["/bin/true"]).exit_code == 0
        sock = host.connection.transport.sock
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1


@pytest.mark.parametrize(
    ("defaults", "connections", "peak", "queued"),
    [({}, 2, 16, 0), ({"max_startups": "3"}, 1, 10, 6)],
    ids=["stock MaxStartups", "MaxStartups 3"],
)
def test_queued_commands_get_another_connection_within_maxstartups(
    shared_lab: LabHandle,
    tmp_path: Path,
    defaults: dict[str, str],
    connections: int,
    peak: int,
    queued: int,
) -> None:
    """16 commands at once on pve1 (MaxSessions 10): a second connection, logged in as
    the first, takes the 6 the first has no session for, and none queues; a host whose
    MaxStartups start is 3 keeps its one connection (at most half of 3), and 6 queue."""
    log = Path(shared_lab.lab.nodes()[0].log)
    logged_before = len(log.read_bytes())
    address, settings, label = pve1_login(shared_lab, tmp_path, **defaults)
    with contextlib.closing(SshEndpoint(label, address, settings)) as host:
        outcomes = all_at_once(16, lambda: host.run(["/bin/sh", "-c", "sleep 3; echo done"]))
        use, opened = host.use(), host.connections
    assert [o.text if isinstance(o, Result) else repr(o) for o in outcomes] == ["done\n"] * 16
    logins = log.read_bytes()[logged_before:].count(b"Accepted publickey")
    assert (opened, logins, use.peak, use.waited) == (connections, connections, peak, queued)


def test_max_sessions_from_the_inventory_caps_the_connection(
    shared_lab: LabHandle, tmp_path: Path
) -> None:
    with contextlib.closing(host_transport(shared_lab, tmp_path, max_sessions=3)) as host:
        outcomes = all_at_once(6, lambda: host.run(["/bin/sh", "-c", "sleep 1"]))
        use = host.sessions.use()
    assert all(isinstance(o, Result) and o.ok for o in outcomes), outcomes
    assert (use.limit, use.peak) == (3, 3)


def test_step_timeout_does_not_count_the_wait_for_a_session(
    shared_lab: LabHandle, tmp_path: Path
) -> None:
    """One slot, four 1 s commands with a 3 s timeout each: the last waits about 3 s
    in the queue, which must not count against its own timeout."""
    with contextlib.closing(host_transport(shared_lab, tmp_path, max_sessions=1)) as host:
        outcomes = all_at_once(4, lambda: host.run(["/bin/sh", "-c", "sleep 1"], timeout=3))
        use = host.sessions.use()
    assert all(isinstance(o, Result) and o.ok for o in outcomes), outcomes
    assert (use.peak, use.waited) == (1, 3)


def test_forwarded_streams_take_no_session_slot(shared_lab: LabHandle, tmp_path: Path) -> None:
    node = shared_lab.lab.nodes()[0]
    with contextlib.closing(host_transport(shared_lab, tmp_path, max_sessions=1)) as host:
        holding = threading.Thread(target=host.run, args=(["/bin/sh", "-c", "sleep 3"],))
        holding.start()
        try:
            while host.sessions.use().peak < 1:
                threading.Event().wait(0.05)
            stream = host.open_stream(node.address, node.port, timeout=10)
            try:
                banner = stream.makefile("rb").readline()
            finally:
                stream.close()
            assert host.sessions.use().waited == 0
        finally:
            holding.join(30)
    assert banner.startswith(b"SSH-2.0-OpenSSH")


def test_streams_beyond_the_connections_cap_wait_for_a_free_one(
    shared_lab: LabHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ssh, "MAX_STREAMS", 2)
    node = shared_lab.lab.nodes()[0]
    with contextlib.closing(host_transport(shared_lab, tmp_path)) as host:
        first = host.open_stream(node.address, node.port, timeout=10)
        second = host.open_stream(node.address, node.port, timeout=10)
        with pytest.raises(TransportError, match="all 2 streams of the connection stayed busy"):
            host.open_stream(node.address, node.port, timeout=1)
        first.close()
        first.close()  # a second close frees nothing more
        third = host.open_stream(node.address, node.port, timeout=10)
        assert third.makefile("rb").readline().startswith(b"SSH-2.0-OpenSSH")
        with pytest.raises(TransportError, match="stayed busy"):
            host.open_stream(node.address, node.port, timeout=1)
        for stream in (second, third):
            stream.close()


@pytest.mark.parametrize(
    ("defaults", "connections"),
    [({}, 2), ({"max_startups": "3"}, 1)],
    ids=["stock MaxStartups", "MaxStartups 3"],
)
def test_streams_beyond_a_connections_cap_get_another_connection_within_maxstartups(
    shared_lab: LabHandle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    defaults: dict[str, str],
    connections: int,
) -> None:
    """Two streams a connection: a third opens at once on a second connection (16 gates'
    probes on one host at field speed kept one connection's streams taken for minutes);
    a host whose MaxStartups start is 3 keeps its one connection, and the third waits."""
    monkeypatch.setattr(ssh, "MAX_STREAMS", 2)
    node = shared_lab.lab.nodes()[0]
    address, settings, label = pve1_login(shared_lab, tmp_path, **defaults)
    with contextlib.closing(SshEndpoint(label, address, settings)) as host:
        streams = [host.open_stream(node.address, node.port, timeout=10) for _ in range(2)]
        try:
            if connections == 1:
                with pytest.raises(TransportError, match="all 2 streams of the connection"):
                    host.open_stream(node.address, node.port, timeout=1)
            else:
                streams.append(host.open_stream(node.address, node.port, timeout=1))
            banners = [stream.makefile("rb").readline() for stream in streams]
            opened = host.connections
        finally:
            for stream in streams:
                stream.close()
    assert opened == connections
    assert all(banner.startswith(b"SSH-2.0-OpenSSH") for banner in banners), banners


def test_a_stream_on_a_lost_connection_closes_quietly_and_frees_its_slot(
    shared_lab: LabHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing a channel sends a message: on a connection that is gone paramiko raises
    EOFError there, which must not escape a probe's cleanup (it used to, as tracebacks)."""
    monkeypatch.setattr(ssh, "MAX_STREAMS", 1)
    node = shared_lab.lab.nodes()[0]
    with contextlib.closing(host_transport(shared_lab, tmp_path)) as host:
        stream = host.open_stream(node.address, node.port, timeout=10)
        host._transport().sock.shutdown(socket.SHUT_RDWR)  # the connection under it dies
        stream.close()
        assert host.streams.acquire(timeout=0)  # its slot is free again


def test_refusals_are_told_from_other_channel_failures(
    shared_lab: LabHandle, tmp_path: Path
) -> None:
    with contextlib.closing(host_transport(shared_lab, tmp_path)) as host:
        lost = paramiko.SSHException("Unable to open channel.")
        assert not host._refused(lost)  # not connected: nothing was refused
        host.run(["true"])
        assert host._refused(paramiko.ChannelException(2, "Connect failed"))
        assert host._refused(lost)  # a live connection: the reason went to another open
        assert not host._refused(paramiko.ChannelException(1, "Administratively prohibited"))
        assert not host._refused(paramiko.SSHException("Timeout opening channel."))


def test_an_exec_sshd_cannot_fork_is_tried_again_and_runs_once(
    shared_lab: LabHandle, tmp_path: Path
) -> None:
    """A host's sshd short of file descriptors (24) cannot make the pipes of every
    command: it answers their exec requests with a failure (`do_exec_no_pty: pipe err`),
    which paramiko reports as "Channel closed.". Those commands never ran, so each is
    tried again until it gets its pipes, and each runs exactly once."""
    node = shared_lab.lab.nodes()[0]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config, log, pid_file = tmp_path / "sshd_config", tmp_path / "sshd.log", tmp_path / "sshd.pid"
    config.write_text(
        re.sub(
            r"(?m)^PidFile .*$",
            f"PidFile {pid_file}",
            Path(node.config)
            .read_text()
            .replace(f"{node.address}:{node.port}", f"127.0.0.1:{port}"),
        )
    )
    host_key = re.search(r"(?m)^HostKey (.*)$", config.read_text())
    assert host_key
    known_hosts = tmp_path / "known_hosts"
    key_line = Path(host_key[1] + ".pub").read_text().split()[:2]
    known_hosts.write_text(f"[127.0.0.1]:{port} {' '.join(key_line)}\n")
    short = subprocess.Popen(
        ["prlimit", "--nofile=24:24", *sshd.sshd_argv(config, log)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # prlimit sets the limit and execs sshd: one PID
    try:
        sshd.wait_listening("127.0.0.1", port, short.pid, log)
        data = yaml.safe_load(shared_lab.inventory.read_text())
        data["hosts"]["pve1"].update(address="127.0.0.1", port=port)
        data["defaults"]["known_hosts"] = str(known_hosts)
        edited = tmp_path / "inventory.yaml"
        edited.write_text(yaml.safe_dump(data, sort_keys=False))
        address, settings, label = load_inventory(edited).login("ct200")
        marks = tmp_path / "ran"
        command = ["/bin/sh", "-c", f"echo x >> {marks}; sleep 1; echo done"]
        with contextlib.closing(SshTransport(label, address, settings)) as host:
            outcomes = all_at_once(8, lambda: host.run(command))
            use = host.sessions.use()
    finally:
        short.terminate()
        short.wait(10)
    assert [o.text if isinstance(o, Result) else repr(o) for o in outcomes] == ["done\n"] * 8
    assert marks.read_text() == "x\n" * 8
    refused_execs = log.read_text().count("do_exec_no_pty: pipe err")
    assert refused_execs >= 1 and use.refused >= refused_execs


def test_commands_and_streams_ended_mid_input_leave_the_connection_up(
    shared_lab: LabHandle, tmp_path: Path
) -> None:
    """sshd drops the whole connection on a message for a channel it has freed. Commands
    that exit without reading their input, and streams closed by another thread while
    they send (a gate cancelling its requests), must never send one."""
    log = Path(shared_lab.lab.nodes()[0].log)
    logged_before = len(log.read_bytes())
    megabyte = b"x" * (1 << 20)
    with socket.create_server(("127.0.0.1", 0)) as sink:
        sink_port = sink.getsockname()[1]
        threading.Thread(target=drain_connections, args=(sink,), daemon=True).start()
        with contextlib.closing(host_transport(shared_lab, tmp_path)) as host:

            def exits_unread() -> Result:
                for _ in range(4):
                    result = host.run(["/bin/sh", "-c", "exit 3"], stdin=megabyte)
                return result

            outcomes = all_at_once(8, exits_unread)
            for _ in range(16):
                stream = host.open_stream("127.0.0.1", sink_port, timeout=10)
                closer = threading.Timer(0.002, stream.close)
                closer.start()
                with contextlib.suppress(OSError):
                    stream.sendall(megabyte)
                closer.join()
            assert host.run(["true"]).ok
    assert [o.exit_code if isinstance(o, Result) else repr(o) for o in outcomes] == [3] * 8
    assert b"nonexistent channel" not in log.read_bytes()[logged_before:]


def drain_connections(server: socket.socket) -> None:
    """Accept connections and read each to its end, one thread each, until closed."""
    while True:
        try:
            connection, _ = server.accept()
        except OSError:
            return
        threading.Thread(target=drain, args=(connection,), daemon=True).start()


def drain(connection: socket.socket) -> None:
    with connection:
        while connection.recv(1 << 16):
            pass
