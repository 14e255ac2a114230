"""Why a connection failed, in the user's terms: a bad key file is bad input (exit 2,
naming the inventory line); a refused key, a closed port and no route are told apart."""

from __future__ import annotations

import errno
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from labtools import LabHandle
from paramiko.ssh_exception import NoValidConnectionsError

from orchestrator.transport.ssh import connect_failure


def write_inventory(lab: LabHandle, tmp_path: Path, change: dict) -> Path:
    inventory = yaml.safe_load(lab.inventory.read_text())
    for dotted, value in change.items():
        node = inventory
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


@pytest.mark.lab
def test_missing_identity_file_is_bad_input_naming_the_line(
    shared_lab: LabHandle, tmp_path: Path
) -> None:
    missing = tmp_path / "no_such_key"
    inventory = write_inventory(shared_lab, tmp_path, {"defaults.identity_file": str(missing)})
    line = next(
        n for n, text in enumerate(inventory.read_text().splitlines(), 1) if "identity_file" in text
    )
    result = shared_lab.orch("deploy", "qwen-dflash", "-i", str(inventory), "--json")
    assert result.code == 2, result.stderr
    canary = result.json["targets"][0]
    assert canary["error"] == (
        f"{inventory}:{line}:3: defaults.identity_file: cannot read {missing}: "
        "No such file or directory"
    )
    assert not shared_lab.deployment_dir("ct200").exists()


@pytest.mark.lab
def test_refused_key_is_permission_denied(shared_lab: LabHandle, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger], check=True)
    inventory = write_inventory(shared_lab, tmp_path, {"defaults.identity_file": str(stranger)})
    result = shared_lab.orch("deploy", "qwen-dflash", "-i", str(inventory), "--json")
    assert result.code == 3
    error = result.json["targets"][0]["error"]
    assert error.startswith("pve1: connect: permission denied as ")
    assert "authorized_keys" in error


@pytest.mark.lab
def test_closed_port_is_connection_refused(shared_lab: LabHandle, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on, on the lab's host address
        host = yaml.safe_load(shared_lab.inventory.read_text())["hosts"]["pve1"]
        probe.bind((host["address"], 0))
        port = probe.getsockname()[1]
    inventory = write_inventory(shared_lab, tmp_path, {"hosts.pve1.port": port})
    result = shared_lab.orch(
        "deploy", "qwen-dflash", "-i", str(inventory), "--limit", "ct200", "--json"
    )
    assert result.code == 3
    error = result.json["targets"][0]["error"]
    assert error.startswith(f"pve1: connect: {host['address']}:{port}: connection refused")
    assert "no sshd listens" in error


@pytest.mark.lab
def test_host_closing_the_handshake_is_asked_again_then_an_error(
    shared_lab: LabHandle, tmp_path: Path
) -> None:
    """A host that sends its banner and hangs up (sshd dropping under MaxStartups) is a
    connect error for that host after three tries, not click's bare "Aborted!"."""
    host = yaml.safe_load(shared_lab.inventory.read_text())["hosts"]["pve1"]
    accepted: list[int] = []
    with socket.socket() as server:
        server.bind((host["address"], 0))
        server.listen()
        port = server.getsockname()[1]

        def hang_up_after_the_banner() -> None:
            while True:
                try:
                    client, _ = server.accept()
                except OSError:  # the listening socket was closed: the test is over
                    return
                with client:
                    accepted.append(1)
                    client.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n")
                    client.recv(4096)

        threading.Thread(target=hang_up_after_the_banner, daemon=True).start()
        inventory = write_inventory(shared_lab, tmp_path, {"hosts.pve1.port": port})
        result = shared_lab.orch(
            "deploy", "qwen-dflash", "-i", str(inventory), "--limit", "ct200", "--json"
        )
    assert result.code == 3, result.stderr
    assert "Aborted" not in result.stderr
    error = result.json["targets"][0]["error"]
    assert error.startswith(
        f"pve1: connect: {host['address']}:{port}: the host closed the connection during "
        "the handshake, 3 times"
    )
    assert len(accepted) == 3


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (TimeoutError("timed out"), "no answer within 10 s"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "no route to host"),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), "no route to host"),
        (socket.gaierror(-2, "Name or service not known"), "cannot resolve the name"),
        (
            NoValidConnectionsError({("192.0.2.1", 22): ConnectionRefusedError()}),
            "connection refused",
        ),
    ],
)
def test_connect_failures_are_told_apart(error: Exception, reason: str) -> None:
    assert connect_failure(error)[0].startswith(reason)
