"""The lab itself, end to end: `orch lab` as a process, pct exec semantics over real
SSH, HTTP through the host's sshd, host-key checks, and the vLLM stand-in started
from a rendered launch script.

Every lab is stopped by `Lab.down()` (by PID); every transport is closed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from labtools import LabHandle, free_network
from realvllm import VENV, needs_032

from orchestrator.container.server import Server
from orchestrator.errors import HostKeyError, ServiceUnavailable, TransportError
from orchestrator.inventory import Inventory, load_inventory
from orchestrator.lab import realserver, tiny_cache, tiny_models
from orchestrator.lab.cluster import SSH_PORT, Lab
from orchestrator.lab.paths import ContainerPaths, pid_alive
from orchestrator.plan import plan_target
from orchestrator.playbook import find_playbook, load_playbook
from orchestrator.transaction import releases
from orchestrator.transport import http
from orchestrator.transport.pct import PctTransport
from orchestrator.transport.ssh import SshTransport

pytestmark = pytest.mark.lab

FORCED_PATH = ("/sbin", "/bin", "/usr/sbin", "/usr/bin")  # what pct exec allows inside


# -- helpers -----------------------------------------------------------------


def endpoint(inventory: Inventory, container: str, accept_new: bool = False) -> SshTransport:
    """The SSH transport that reaches a container: its host's, or its own sshd."""
    address, settings, label = inventory.login(container)
    return SshTransport(label, address, settings, accept_new)


def cli_handle(root: Path, tmp_path: Path) -> LabHandle:
    env = {**os.environ, "ORCH_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1"}
    return LabHandle(Lab(root), env)


def node_pids(lab: Lab) -> dict[str, int]:
    return {node["name"]: node["pid"] for node in json.loads(lab.state_file.read_text())["nodes"]}


def start_rendered_server(
    inventory: Inventory, transport: PctTransport, name: str
) -> tuple[Server, int]:
    """Write the planned release for `name` and start its launch script, as a deploy does."""
    plan = plan_target(load_playbook(find_playbook("qwen-dflash")), inventory, name)
    releases.write(transport, plan, plan.files)
    server = Server(transport, plan.layout, plan.address, plan.port)
    pid = server.start(plan.release_id)
    server.wait_ready(pid, timeout=30)
    return server, pid


def fingerprint_of(public_key: Path) -> str:
    """SHA256 fingerprint as ssh-keygen prints it (independent of the code under test)."""
    listing = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(public_key)], capture_output=True, text=True, check=True
    )
    return listing.stdout.split()[1]


def known_hosts_name(address: str) -> str:
    return f"[{address}]:{SSH_PORT}"


def forge_known_host(known_hosts: Path, address: str, key_dir: Path) -> str:
    """Replace the recorded key of address with a fresh one; its fingerprint."""
    forged = key_dir / "forged"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "forged", "-f", str(forged)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    kind, blob = Path(f"{forged}.pub").read_text().split()[:2]
    name = known_hosts_name(address)
    lines = known_hosts.read_text().splitlines()
    assert any(line.split()[0] == name for line in lines)
    rewritten = [f"{name} {kind} {blob}" if line.split()[0] == name else line for line in lines]
    known_hosts.write_text("\n".join(rewritten) + "\n")
    return fingerprint_of(Path(f"{forged}.pub"))


def host_key_fingerprint(lab: Lab, node_name: str) -> str:
    node = next(n for n in lab.nodes() if n.name == node_name)
    return fingerprint_of(Path(node.config).parent / "ssh_host_ed25519_key.pub")


def tcp_socket_owners(local: tuple[str, int], remote: tuple[str, int]) -> set[int]:
    """PIDs holding the IPv4 TCP socket local -> remote, found through /proc."""

    def hexed(ip: str, port: int) -> str:
        return f"{socket.inet_aton(ip)[::-1].hex().upper()}:{port:04X}"

    wanted = [hexed(*local), hexed(*remote)]
    rows = (line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:])
    links = {f"socket:[{row[9]}]" for row in rows if row[1:3] == wanted}
    owners = set()
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            if os.readlink(fd) in links:
                owners.add(int(fd.parts[2]))
    return owners


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains text (a lab's directory)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
    return found


def ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        status = Path(f"/proc/{pid}/status").read_text()
        pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        chain.append(pid)
    return chain


# -- fixtures ----------------------------------------------------------------


@pytest.fixture
def inventory(shared_lab: LabHandle) -> Inventory:
    return load_inventory(shared_lab.inventory)


@pytest.fixture
def ct200(inventory: Inventory) -> Iterator[PctTransport]:
    """The pct container, reached through pve1's sshd."""
    host = endpoint(inventory, "ct200")
    try:
        yield PctTransport("ct200", host, inventory.pct_path("pve1"), 200)
    finally:
        host.close()


# -- 1. orch lab up / status / down, as a user runs them -----------------------


def test_lab_up_again_status_and_down_through_the_cli(tmp_path: Path) -> None:
    network = free_network()
    handle = cli_handle(tmp_path / "lab", tmp_path)
    lab = handle.lab
    up = ("lab", "up", "--dir", str(lab.root), "--network", network, "--load-seconds", "0")
    try:
        first = handle.orch(*up)
        assert first.code == 0, str(first)
        assert f"lab started in {lab.root}" in first.stdout
        assert f"next: orch deploy qwen-dflash -i {lab.inventory}" in first.stdout
        inventory = load_inventory(lab.inventory)
        assert inventory.hosts["pve1"].address == f"{network}.1.1"
        assert {n: c.access for n, c in inventory.containers.items()} == {
            "ct200": "pct",
            "ct201": "ssh",
        }
        pids = node_pids(lab)
        assert set(pids) == {"pve1", "ct201"}
        assert all(pid_alive(pid) for pid in pids.values())

        again = handle.orch(*up)
        assert again.code == 0, str(again)
        assert "already running" in again.stdout
        assert node_pids(lab) == pids
        other = handle.orch(*up[:-1], "1")  # another --load-seconds: refused, nothing restarted
        assert other.code == 2
        assert "already runs as" in other.stderr and "orch lab down" in other.stderr
        assert node_pids(lab) == pids

        with contextlib.closing(endpoint(inventory, "ct200")) as host:
            ct200 = PctTransport("ct200", host, inventory.pct_path("pve1"), 200)
            server, server_pid = start_rendered_server(inventory, ct200, "ct200")
            served = http.request(ct200, server.address, server.port, "GET", "/v1/models")
        assert served.status == 200
        assert [m["id"] for m in served.json()["data"]] == ["qwen3.6-27b"]

        status = handle.orch("lab", "status", "--dir", str(lab.root), "--json")
        assert status.code == 0, str(status)
        rows = {row["name"]: row for row in status.json["targets"]}
        assert set(rows) == {"ct200", "ct201"}
        assert all(row["sshd_up"] and row["status"] == "running" for row in rows.values())
        assert rows["ct200"]["servers"] == [server_pid]
        assert server_pid in processes_mentioning(str(lab.root))
        assert rows["ct201"]["ssh"] == f"{network}.1.11:{SSH_PORT}"

        down = handle.orch("lab", "down", "--dir", str(lab.root))
        assert down.code == 0, str(down)
        for pid in [*pids.values(), server_pid]:
            assert str(pid) in down.stdout
            assert not pid_alive(pid), pid
        assert processes_mentioning(str(lab.root)) == []
        after = handle.orch("lab", "status", "--dir", str(lab.root), "--json")
        assert [(r["sshd_up"], r["servers"]) for r in after.json["targets"]] == [(False, [])] * 2

        known_hosts = lab.known_hosts.read_text()
        restarted = handle.orch(*up)
        assert restarted.code == 0, str(restarted)
        assert "lab started" in restarted.stdout
        assert set(node_pids(lab).values()).isdisjoint(pids.values())
        assert lab.known_hosts.read_text() == known_hosts  # host keys survive a restart
    finally:
        lab.down()


def naming(text: str) -> list[int]:
    """Live processes whose command line, environment or working directory names `text`
    (a lab's directory): read from /proc, whatever the lab recorded."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            cwd = os.readlink(entry / "cwd").encode()
            said = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes() + cwd
            if text.encode() in said and pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def descendants(pid: int) -> list[int]:
    """`pid` and every live process below it, by the parent PIDs /proc gives now."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    tree, grew = {pid}, True
    while grew:
        below = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= below
        grew = bool(below)
    return sorted(p for p in tree if pid_alive(p))


def detached(transport: PctTransport | SshTransport, command: list[str], log: str) -> int:
    """`command` started as orch starts a server: its own session, its starter gone."""
    line = f"setsid {shlex.join(command)} < /dev/null > {shlex.quote(log)} 2>&1 & echo $!"
    started = transport.run(["sh", "-c", line])
    assert started.exit_code == 0, started.error_text
    return int(started.text)


@needs_032
def test_lab_down_ends_every_process_started_in_a_container(lab: LabHandle) -> None:
    """A real vLLM started in ct200 (through pct) from a `vllm` outside the lab, and a
    process a session on ct201 (its own sshd) left running, each in a session of its own
    with PPID 1: the lab's records name neither, and after `orch lab down` no process
    started in a container is left: a scan of /proc finds none naming the lab."""
    inventory = load_inventory(lab.inventory)
    ct200_dir = ContainerPaths(Path(next(c.root for c in lab.lab.containers() if c.vmid == 200)))
    environment = {**realserver.server_env(ct200_dir), "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    serve = [
        "env",
        *(f"{name}={value}" for name, value in environment.items()),
        str(VENV / "bin" / "vllm"),
        "serve",
        str(tiny_cache.ensure_made(VENV) / tiny_models.TARGET),
        "--host",
        inventory.containers["ct200"].address,
        "--port",
        "8000",
        *realserver.SERVE_ARGS,
    ]
    with contextlib.closing(endpoint(inventory, "ct200")) as host:
        ct200 = PctTransport("ct200", host, inventory.pct_path("pve1"), 200)
        assert ct200.run(["mkdir", "-p", environment["TMPDIR"]]).exit_code == 0
        server = detached(ct200, serve, str(ct200_dir.root / "vllm.log"))
    with contextlib.closing(endpoint(inventory, "ct201")) as ct201:
        sleeper = detached(ct201, ["sleep", "600"], "/dev/null")
    deadline = time.monotonic() + 300  # vLLM starts its engine process once it read the model
    while len(descendants(server)) < 2 and time.monotonic() < deadline:
        time.sleep(1)
    started = [*descendants(server), sleeper]
    assert len(started) >= 3, (ct200_dir.root / "vllm.log").read_text()[-3000:]
    assert (
        lab.orch("lab", "status", "--dir", str(lab.lab.root), "--json").json["targets"][0][
            "servers"
        ]
        == []
    )  # no record of the real server: the launcher outside the lab wrote none

    down = lab.orch("lab", "down", "--dir", str(lab.lab.root), timeout=120)

    assert down.code == 0, str(down)
    assert [pid for pid in started if pid_alive(pid)] == []
    assert naming(str(lab.lab.root)) == []


def test_pct_stop_ends_every_process_started_in_the_container(ct200: PctTransport) -> None:
    """As a real `pct stop` ends everything in the container's cgroup: a process left
    running in a session of its own, which no record of the lab names."""
    left = detached(ct200, ["sleep", "600"], "/dev/null")
    assert pid_alive(left)
    pct, host = ct200.pct_path, ct200.host
    try:
        assert host.run([pct, "stop", "200"]).exit_code == 0
        assert not pid_alive(left)
    finally:
        assert host.run([pct, "start", "200"]).exit_code == 0


@pytest.mark.parametrize("taken", ["1.1", "1.11"], ids=["host", "direct-ssh-container"])
def test_lab_up_on_a_taken_address_fails_naming_it(tmp_path: Path, taken: str) -> None:
    network = free_network()
    handle = cli_handle(tmp_path / "lab", tmp_path)
    address = f"{network}.{taken}"
    with socket.socket() as squatter:
        squatter.bind((address, SSH_PORT))
        squatter.listen()
        try:
            result = handle.orch("lab", "up", "--dir", str(handle.lab.root), "--network", network)
        finally:
            handle.lab.down()
    assert result.code == 2, result.stdout + result.stderr
    assert f"{address}:{SSH_PORT} is already taken" in result.stderr
    assert "Traceback" not in result.stderr
    assert not handle.lab.root.exists()  # nothing left behind: no directory, no process
    assert processes_mentioning(str(handle.lab.root)) == []
    status = handle.orch("lab", "status", "--dir", str(handle.lab.root))
    assert status.code == 2
    assert "run 'orch lab up' first" in status.stderr


# -- 2. pct exec through real SSH ---------------------------------------------------


@pytest.mark.parametrize("code", [0, 7, 255])
def test_pct_exec_passes_the_exit_status_through(ct200: PctTransport, code: int) -> None:
    result = ct200.run(["/bin/sh", "-c", f"echo out; echo err >&2; exit {code}"])
    assert (result.exit_code, result.stdout, result.stderr) == (code, b"out\n", b"err\n")


def test_pct_exec_passes_binary_stdin_through(ct200: PctTransport) -> None:
    data = bytes(range(256)) * 4096 + b"\r\n\0no trailing newline"
    result = ct200.run(["cat"], stdin=data, timeout=30)
    assert result.exit_code == 0
    assert result.stdout == data


def test_pct_exec_echoing_large_stdin_does_not_deadlock(ct200: PctTransport) -> None:
    data = os.urandom(8 << 20)
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["result"] = ct200.run(["cat"], stdin=data, timeout=5)
        except TransportError as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(7)
    if worker.is_alive():
        ct200.host.close()  # unblocks the stuck send, so nothing outlives the test
        worker.join(5)
        pytest.fail("SshTransport.run still blocked 2 s after its 5 s timeout")
    result = outcome.get("result")
    assert result is not None and result.stdout == data, outcome.get("error")


def test_pct_exec_runs_argv_without_a_shell(ct200: PctTransport) -> None:
    result = ct200.run(["echo", "$HOME;x", "*", "`id`", "a  b"])
    assert result.text == "$HOME;x * `id` a  b\n"


def test_pct_exec_path_is_minimal(ct200: PctTransport, inventory: Inventory) -> None:
    rootfs = Path(inventory.container_vars("ct200")["models_dir"]).parent.parent
    entries = ct200.run(["printenv", "PATH"]).text.strip().split(":")
    assert {e.removeprefix(str(rootfs)) for e in entries} == set(FORCED_PATH)
    home_and_cwd = ct200.run(["/bin/sh", "-c", 'echo "$HOME"; pwd']).text.split()
    assert home_and_cwd == ["/root", str(rootfs)]
    # /usr/local/bin is not searched: vllm needs its absolute path.
    vllm = inventory.container_vars("ct200")["vllm"]
    assert Path(vllm).parent == rootfs / "usr/local/bin"
    by_name = ct200.run(["vllm", "--version"])
    assert by_name.exit_code == 127
    assert 'Failed to exec "vllm"' in by_name.error_text
    assert ct200.run([vllm, "--version"]).exit_code == 0


def test_stopped_container_refuses_exec_until_started(ct200: PctTransport) -> None:
    pct, host = ct200.pct_path, ct200.host
    assert host.run([pct, "stop", "200"]).exit_code == 0
    assert host.run([pct, "status", "200"]).text == "status: stopped\n"
    with pytest.raises(TransportError) as refused:
        ct200.run(["true"])
    assert "container '200' not running!" in str(refused.value)
    assert refused.value.hint.endswith(f"{pct} start 200")

    assert host.run([pct, "start", "200"]).exit_code == 0
    assert host.run([pct, "status", "200"]).text == "status: running\n"
    assert ct200.run(["true"]).exit_code == 0


# -- 3. HTTP through the host's SSH connection ----------------------------------------


BODY = b"hello from the container"


class _Answer(BaseHTTPRequestHandler):
    """200 with BODY, the headers sent `pause` seconds before it; records which
    processes hold the client end of each connection."""

    protocol_version = "HTTP/1.1"  # keep-alive, as vLLM answers
    pause = 0.0
    port: int
    owners: list[set[int]]

    def do_GET(self) -> None:
        server_end = self.connection.getsockname()[:2]
        self.owners.append(tcp_socket_owners(self.client_address[:2], server_end))
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        time.sleep(self.pause)
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def http_server(address: str, **handler_attributes: object) -> Iterator[type[_Answer]]:
    """A threaded HTTP server on address (a free port); yields its handler class."""
    handler = type("Handler", (_Answer,), {"owners": [], **handler_attributes})
    server = ThreadingHTTPServer((address, 0), handler)
    handler.port = server.server_address[1]
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()
        serving.join(5)


def test_http_goes_through_the_host_sshd(shared_lab: LabHandle, ct200: PctTransport) -> None:
    address = load_inventory(shared_lab.inventory).containers["ct200"].address
    sshd_log = Path(next(n for n in shared_lab.lab.nodes() if n.name == "pve1").log)
    with socket.socket() as closed_port:  # bound, never listening: connections are refused
        closed_port.bind((address, 0))
        port = closed_port.getsockname()[1]
        with pytest.raises(ServiceUnavailable):
            http.request(ct200, address, port, "GET", "/health", timeout=5)
    assert f"connect_to {address} port {port}: failed" in sshd_log.read_text()

    with http_server(address) as handler:
        response = http.request(ct200, address, handler.port, "GET", "/", timeout=5)
    assert (response.status, response.body) == (200, BODY)
    (owners,) = handler.owners  # the client end belongs to pve1's sshd, not to us
    host_sshd = node_pids(shared_lab.lab)["pve1"]
    assert owners and os.getpid() not in owners
    assert all(host_sshd in ancestors(pid) for pid in owners)


def test_http_reads_the_whole_body_of_a_closing_response(
    inventory: Inventory, ct200: PctTransport
) -> None:
    address = inventory.containers["ct200"].address
    with http_server(address, protocol_version="HTTP/1.0", pause=0.2) as handler:
        response = http.request(ct200, address, handler.port, "GET", "/", timeout=5)
    assert response.body == BODY


# -- 4. direct SSH and host keys --------------------------------------------------------


def test_direct_ssh_container_reaches_its_own_sshd(inventory: Inventory) -> None:
    with contextlib.closing(endpoint(inventory, "ct201")) as ct201:
        result = ct201.run(["/bin/sh", "-c", 'echo "$SSH_CONNECTION"; exit 3'])
    assert result.exit_code == 3
    assert result.text.split()[2:] == [inventory.containers["ct201"].address, str(SSH_PORT)]


@pytest.mark.parametrize("accept_new", [False, True], ids=["strict", "accept-new"])
def test_changed_host_key_is_refused(lab: LabHandle, tmp_path: Path, accept_new: bool) -> None:
    inventory = load_inventory(lab.inventory)
    address = inventory.containers["ct201"].address
    forged = forge_known_host(lab.lab.known_hosts, address, tmp_path)
    recorded = lab.lab.known_hosts.read_text()
    with (
        contextlib.closing(endpoint(inventory, "ct201", accept_new)) as ct201,
        pytest.raises(HostKeyError) as refused,
    ):
        ct201.run(["true"])
    message = str(refused.value)
    assert "CHANGED" in message
    assert forged in message
    assert host_key_fingerprint(lab.lab, "ct201") in message
    assert lab.lab.known_hosts.read_text() == recorded  # never overwritten


def test_cli_accept_new_host_keys_does_not_override_a_changed_key(
    lab: LabHandle, tmp_path: Path
) -> None:
    inventory = load_inventory(lab.inventory)
    address = inventory.containers["ct201"].address
    forged = forge_known_host(lab.lab.known_hosts, address, tmp_path)
    result = lab.orch(
        "status", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct201",
        "--accept-new-host-keys", "--json",
    )  # fmt: skip
    assert result.code == 3, result.stderr
    (row,) = result.json["targets"]
    assert (row["name"], row["state"]) == ("ct201", "unreachable")
    assert "host key CHANGED" in row["error"] and forged in row["error"]


def test_changed_host_key_hint_removes_the_stale_line(lab: LabHandle, tmp_path: Path) -> None:
    inventory = load_inventory(lab.inventory)
    address = inventory.containers["ct201"].address
    forge_known_host(lab.lab.known_hosts, address, tmp_path)
    with (
        contextlib.closing(endpoint(inventory, "ct201")) as ct201,
        pytest.raises(HostKeyError) as e,
    ):
        ct201.run(["true"])
    command = shlex.split(e.value.hint.split("with: ", 1)[1])
    assert command[0] == "ssh-keygen"
    subprocess.run(command, check=True, capture_output=True)
    names = [line.split()[0] for line in lab.lab.known_hosts.read_text().splitlines()]
    assert known_hosts_name(address) not in names


def test_unknown_host_key_needs_accept_new_which_records_it(lab: LabHandle) -> None:
    inventory = load_inventory(lab.inventory)
    known_hosts = lab.lab.known_hosts
    name = known_hosts_name(inventory.containers["ct201"].address)
    kept = [line for line in known_hosts.read_text().splitlines() if line.split()[0] != name]
    known_hosts.write_text("\n".join(kept) + "\n")
    real = host_key_fingerprint(lab.lab, "ct201")

    with (
        contextlib.closing(endpoint(inventory, "ct201")) as strict,
        pytest.raises(HostKeyError) as e,
    ):
        strict.run(["true"])
    assert "unknown host key" in str(e.value) and real in str(e.value)
    assert "--accept-new-host-keys" in e.value.hint

    with contextlib.closing(endpoint(inventory, "ct201", accept_new=True)) as trusting:
        assert trusting.run(["true"]).exit_code == 0
    added = known_hosts.read_text().splitlines()[len(kept) :]
    assert [line.split()[0] for line in added] == [name]
    with contextlib.closing(endpoint(inventory, "ct201")) as strict_again:
        assert strict_again.run(["true"]).exit_code == 0
