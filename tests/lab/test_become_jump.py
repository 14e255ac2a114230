"""Non-root logins with `become: sudo`, and jump hosts: units, and on the lab
through a second real sshd (the jump host, or a host logged into as a non-root user)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
import yaml
from labtools import FAST, LabHandle

from orchestrator.errors import InputError
from orchestrator.inventory import Inventory, load_inventory
from orchestrator.lab import sshd
from orchestrator.lab.cluster import SSH_PORT, stop_pids
from orchestrator.transport.base import Result
from orchestrator.transport.become import refusal, sudo_argv
from orchestrator.transport.login import parse_jump
from orchestrator.transport.ssh import SshTransport

# --- units ------------------------------------------------------------------------------


def test_sudo_argv_is_non_interactive_and_ends_options() -> None:
    assert sudo_argv(["pct", "exec", "200", "--", "id"]) == [
        "sudo", "-n", "-u", "root", "--", "pct", "exec", "200", "--", "id",
    ]  # fmt: skip
    assert sudo_argv(["id"], "vllm")[:4] == ["sudo", "-n", "-u", "vllm"]


def sudo_result(code: int, stderr: bytes) -> Result:
    return Result(("id",), code, b"", stderr)


def test_sudo_refusals_are_told_apart_from_the_commands_own_failures() -> None:
    reason, fix = refusal(sudo_result(1, b"sudo: a password is required\n"), "ops", None) or (
        "",
        "",
    )
    assert reason == "sudo wants a password to run commands as root"
    assert "NOPASSWD" in fix and "'ops ALL=(root) NOPASSWD: ALL'" in fix
    refused = refusal(sudo_result(1, b"ops is not in the sudoers file.\n"), "ops", None)
    assert refused is None  # not sudo's prefix: a command may print anything
    noisy = b"Could not chdir to home directory /home/ops\nsudo: a password is required\n"
    assert refusal(sudo_result(1, noisy), "ops", None) is not None
    refused = refusal(
        sudo_result(1, b"sudo: ops is not in the sudoers file.  This incident has been reported\n"),
        "ops",
        "vllm",
    )
    assert refused is not None and refused[0].startswith("sudo refused: ")
    assert refusal(sudo_result(1, b"grep: x: No such file\n"), "ops", None) is None
    assert refusal(sudo_result(2, b"sudo: a password is required\n"), "ops", None) is None


def inventory_of(data: dict, tmp_path: Path) -> Inventory:
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(path)


BASE = {
    "defaults": {"user": "ops", "become": "sudo", "jump": "bastion@203.0.113.5:2200"},
    "hosts": {"pve1": {"address": "192.0.2.1"}, "pve2": {"address": "192.0.2.2", "jump": "gw"}},
    "containers": {
        "ct200": {"vmid": 200, "host": "pve1", "address": "192.0.2.10"},
        "ct300": {
            "vmid": 300,
            "host": "pve2",
            "address": "192.0.2.30",
            "access": "ssh",
            "ssh": {"become_user": "vllm", "user": "deploy"},
        },
    },
}


def test_become_and_jump_fall_back_from_container_to_host_to_defaults(tmp_path: Path) -> None:
    inventory = inventory_of(BASE, tmp_path)
    _, pct_login, _ = inventory.login("ct200")
    assert (pct_login.become, pct_login.become_user, pct_login.jump) == (
        "sudo", None, "bastion@203.0.113.5:2200",
    )  # fmt: skip
    _, direct, _ = inventory.login("ct300")
    assert (direct.user, direct.become, direct.become_user, direct.jump) == (
        "deploy", "sudo", "vllm", "gw",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("jump", "parsed"),
    [
        ("bastion@203.0.113.5:2200", ("bastion", "203.0.113.5", 2200)),
        ("gw", (None, "gw", None)),
        ("root@[2001:db8::1]:22", ("root", "2001:db8::1", 22)),
    ],
)
def test_jump_parses(jump: str, parsed: tuple) -> None:
    assert parse_jump(jump) == parsed


@pytest.mark.parametrize(
    ("field", "value"),
    [("jump", "a b@host"), ("jump", "host:70000"), ("jump", "-oProxy"),
     ("become", "su"), ("become_user", "root;id")],
)  # fmt: skip
def test_bad_become_and_jump_are_bad_input(field: str, value: str, tmp_path: Path) -> None:
    data = {**BASE, "defaults": {**BASE["defaults"], field: value}}
    with pytest.raises(InputError, match=f"defaults.{field}"):
        inventory_of(data, tmp_path)


# --- on the lab -------------------------------------------------------------------------


@contextmanager
def extra_sshd(lab: LabHandle, name: str, authorized_keys: Path) -> Iterator[str]:
    """One more real sshd on the lab's network, stopped by its PID; yields its address."""
    network = ".".join(lab.lab.nodes()[0].address.split(".")[:2])
    address = f"{network}.250.{1 if name == 'jump' else 2}"
    directory = lab.lab.root / name
    directory.mkdir()
    host_key = directory / "ssh_host_ed25519_key"
    sshd.keygen(host_key, name)
    config, log = directory / "sshd_config", directory / "sshd.log"
    config.write_text(
        sshd.sshd_config(address, SSH_PORT, host_key, authorized_keys, directory / "sshd.pid")
    )
    pid = sshd.start(config, log)
    try:
        sshd.wait_listening(address, SSH_PORT, pid, log)
        yield address
    finally:
        stop_pids([pid])


def merged(data: dict, edit: dict) -> dict:
    return {
        key: merged(data[key], value) if isinstance(value, dict) and key in data else value
        for key, value in {**data, **edit}.items()
    } | {key: data[key] for key in data if key not in edit}


def edited_inventory(lab: LabHandle, path: Path, edit: dict) -> Path:
    """The lab's inventory with `edit` merged into it, written to `path`."""
    path.write_text(yaml.safe_dump(merged(yaml.safe_load(lab.inventory.read_text()), edit)))
    return path


@contextmanager
def through_jump(lab: LabHandle, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A jump host on the lab, and the lab's inventory reaching everything through it:
    (the jump host's address, the inventory)."""
    with extra_sshd(lab, "jump", lab.lab.root / "ssh" / "authorized_keys") as jump:
        edit = {"defaults": {"jump": f"{jump}:{SSH_PORT}"}}
        yield jump, edited_inventory(lab, tmp_path / "inv.yaml", edit)


@pytest.mark.lab
def test_deploy_through_a_jump_host_with_its_host_key_checked(
    lab: LabHandle, tmp_path: Path
) -> None:
    with through_jump(lab, tmp_path) as (jump, inventory):
        args = ["deploy", "qwen-dflash", "-i", str(inventory), "--json", *FAST]
        refused = lab.orch(*args)
        assert refused.code == 3
        error = refused.json["targets"][0]["error"]
        assert error.startswith(f"pve1: connect: jump host {jump}:{SSH_PORT}: unknown host key")
        jump_log = lab.lab.root / "jump" / "sshd.log"
        assert "Accepted publickey" not in jump_log.read_text()

        deployed = lab.orch(*args, "--accept-new-host-keys")
        assert deployed.code == 0, str(deployed)
        assert {t["result"] for t in deployed.json["targets"]} == {"deployed"}
        assert f"[{jump}]:{SSH_PORT} ssh-ed25519 " in lab.lab.known_hosts.read_text()
        # One login at the jump host per endpoint: the Proxmox host and the direct container.
        assert jump_log.read_text().count("Accepted publickey") == 2


@pytest.mark.lab
def test_through_a_jump_host_both_logins_send_each_packet_at_once(
    lab: LabHandle, tmp_path: Path
) -> None:
    """TCP_NODELAY on the jump host's socket, the one that carries the login's packets."""
    with through_jump(lab, tmp_path) as (_, inventory):
        address, settings, label = load_inventory(inventory).login("ct200")
        with closing(SshTransport(label, address, settings, accept_new_host_keys=True)) as host:
            assert host.run(["/bin/true"]).exit_code == 0
            assert host.gateway is not None
            sock = host.gateway.transport.sock
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1


def have_root_and_sudo() -> bool:
    return os.geteuid() == 0 and all(map(shutil.which, ("sudo", "useradd", "userdel")))


@contextmanager
def sudo_user(public_key: str) -> Iterator[tuple[str, Path, Path]]:
    """A throw-away non-root user allowed to sudo without a password, removed afterwards.

    Yields (name, its authorized_keys file, its sudoers rule)."""
    name = f"orch-test-{os.getpid()}"
    rule = Path(f"/etc/sudoers.d/{name}")
    keys_dir = Path(tempfile.mkdtemp(prefix="orch-become-"))
    subprocess.run(["useradd", "-M", "-p", "*", "-s", "/bin/sh", name], check=True)
    try:
        keys_dir.chmod(0o755)
        (keys_dir / "authorized_keys").write_text(public_key)
        (keys_dir / "authorized_keys").chmod(0o644)
        rule.write_text(f"{name} ALL=(root) NOPASSWD: ALL\n")
        rule.chmod(0o440)
        yield name, keys_dir / "authorized_keys", rule
    finally:
        rule.unlink(missing_ok=True)
        subprocess.run(["userdel", name], check=False)
        shutil.rmtree(keys_dir)


@pytest.mark.lab
@pytest.mark.skipif(not have_root_and_sudo(), reason="needs root (to add a user) and sudo")
def test_deploy_as_a_non_root_login_through_sudo(lab: LabHandle, tmp_path: Path) -> None:
    public_key = Path(f"{lab.lab.key}.pub").read_text()
    with sudo_user(public_key) as (user, keys, rule), extra_sshd(lab, "login", keys) as address:
        subprocess.run(
            ["ssh-keyscan", "-p", str(SSH_PORT), address], capture_output=True, check=True
        )
        host = {"address": address, "user": user, "become": "sudo"}
        inventory = edited_inventory(lab, tmp_path / "inv.yaml", {"hosts": {"pve1": host}})
        args = ["-i", str(inventory), "--limit", "ct200", "--accept-new-host-keys"]
        deployed = lab.orch("deploy", "qwen-dflash", "--json", *FAST, *args)
        assert deployed.code == 0, str(deployed)
        assert deployed.json["targets"][0]["result"] == "deployed"
        log = (lab.lab.root / "login" / "sshd.log").read_text()
        assert f"Accepted publickey for {user}" in log
        doctor = lab.orch("doctor", *args)
        assert doctor.code == 0, str(doctor)
        assert "pve1   login" in doctor.stdout and "sudo -n -u root works" in doctor.stdout

        without_sudo = edited_inventory(
            lab, tmp_path / "plain.yaml", {"hosts": {"pve1": {"address": address, "user": user}}}
        )
        plain = lab.orch("status", "qwen-dflash", "-i", str(without_sudo), *args[2:])
        assert plain.code == 3  # the user alone may not read what root deployed

        rule.write_text(f"{user} ALL=(root) ALL\n")  # a rule that asks for the password
        asked = lab.orch("status", "qwen-dflash", "--json", *args)
        assert asked.code == 3
        assert "sudo wants a password to run commands as root" in asked.stdout + asked.stderr
        assert f"'{user} ALL=(root) NOPASSWD: ALL'" in asked.stdout + asked.stderr
        refused = lab.orch("doctor", *args)
        assert refused.code == 3
        assert "pve1   login      FAIL  sudo wants a password to run commands as root" in (
            refused.stdout
        )
