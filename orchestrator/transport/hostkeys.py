"""Host-key policies: verify every host key, never accept a changed one.

Fabric installs paramiko's AutoAddPolicy, which trusts any key; a transport
replaces it with one of these before connecting.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import paramiko

from orchestrator.errors import HostKeyError


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as `ssh-keygen -l` shows it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(hostname: str, port: int) -> str:
    return hostname if port == 22 else f"[{hostname}]:{port}"


class RefuseUnknownHostKey(paramiko.MissingHostKeyPolicy):
    """Refuse a host whose key is not in known_hosts, saying how to trust it."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        raise HostKeyError(
            hostname,
            "connect",
            f"unknown host key {key.get_name()} {fingerprint(key)} (not in {self.known_hosts})",
            "check the fingerprint with the host's administrator, then run again with "
            "--accept-new-host-keys (or add it with ssh-keyscan to that file)",
        )


class AcceptNewHostKey(paramiko.MissingHostKeyPolicy):
    """Trust a key never seen before and record it; changed keys still fail."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with self.known_hosts.open("a", encoding="ascii") as file:
            file.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)
