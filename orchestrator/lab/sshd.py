"""Real OpenSSH servers for the lab: key-only, one per loopback address.

`sshd_config` and `sshd_argv` are pure; `start` runs one detached and returns
its PID, which is all the lab keeps to stop it later.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import InputError, NeedsAttention
from orchestrator.lab.paths import pid_alive

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = "ssh-keygen"
PRIVSEP_DIR = Path("/run/sshd")
INSTALL_HINT = "install it with: sudo apt-get install openssh-server"


@dataclass(frozen=True)
class SessionLimits:
    """Raised sshd limits for a lab that asks for them; None keeps OpenSSH's default
    (MaxSessions 10, MaxStartups 10:30:100: docs/field-notes/ssh.md)."""

    max_sessions: int | None = None
    max_startups: str | None = None


def sshd_config(
    address: str,
    port: int,
    host_key: Path,
    authorized_keys: Path,
    pid_file: Path,
    path: str | None = None,
    limits: SessionLimits | None = None,
    environment: Sequence[str] = (),
    force_command: Path | None = None,
) -> str:
    """OpenSSH's own MaxSessions and MaxStartups unless `limits` raises them: the lab
    must refuse what a stock Debian host refuses. `path`, when given, is the PATH of
    every session; `environment` (NAME=VALUE entries) is set in every session too.
    sshd takes the first SetEnv line only: all variables go on one. `force_command`,
    when given, runs every session's command (a container's: the lab's hold,
    lab/hold.py)."""
    raised = []
    if limits and limits.max_sessions is not None:
        raised.append(f"MaxSessions {limits.max_sessions}")
    if limits and limits.max_startups is not None:
        raised.append(f"MaxStartups {limits.max_startups}")
    # bash sources ~/.bashrc for a command sshd runs while SHLVL < 2 (bash shell.c,
    # run_startup_files): the lab would pay this machine user's rc files per command,
    # which a Proxmox host's stock root .bashrc does not cost.
    settings = ["SHLVL=1", *([f"PATH={path}"] if path else []), *environment]
    return "\n".join(
        [
            f"ListenAddress {address}:{port}",
            f"HostKey {host_key}",
            f"PidFile {pid_file}",
            f"AuthorizedKeysFile {authorized_keys}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "StrictModes no",
            "AllowTcpForwarding yes",
            "X11Forwarding no",
            "PrintMotd no",
            f"SetEnv {' '.join(_quoted(setting) for setting in settings)}",
            *raised,
            *([f"ForceCommand {force_command}"] if force_command else []),
            "LogLevel VERBOSE",
            "",
        ]
    )


def _quoted(setting: str) -> str:
    """A SetEnv entry as sshd_config reads it: double quotes keep spaces in a value
    (OpenSSH 9.2p1's `sshd -T` shows the entry whole); a double quote or a backslash,
    which sshd would read as quoting, is refused."""
    if '"' in setting or "\\" in setting:
        raise ValueError(f"SetEnv entry {setting!r}: no double quote or backslash allowed")
    return f'"{setting}"' if " " in setting else setting


def sshd_argv(config: Path, log: Path) -> list[str]:
    return [str(SSHD), "-D", "-f", str(config), "-E", str(log)]


def require_sshd() -> None:
    if not SSHD.exists():
        raise InputError(f"the lab needs {SSHD} (Debian's openssh-server); {INSTALL_HINT}")


def keygen(path: Path, comment: str) -> None:
    """An ed25519 key pair without passphrase, unless it exists already."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )


def ensure_bindable(address: str, port: int) -> None:
    """A clear error now beats an sshd that dies in its log."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            raise InputError(
                f"{address}:{port} is already taken or unusable: {exc.strerror}; "
                "choose another --network or stop what uses it"
            ) from None


def start(config: Path, log: Path) -> int:
    """Start sshd in its own session, detached from us; return its PID."""
    if os.geteuid() == 0:
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    with open(os.devnull, "rb") as devnull:
        process = subprocess.Popen(
            sshd_argv(config, log),
            stdin=devnull,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    return process.pid


def wait_listening(address: str, port: int, pid: int, log: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            if not pid_alive(pid):
                break
            time.sleep(0.05)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise NeedsAttention(f"sshd on {address}:{port} did not start; its log says:\n{tail}")


def is_our_sshd(pid: int, config: Path) -> bool:
    """The PID still runs sshd with this config: a reused PID is not ours to stop."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()  # sshd rewrites it as one title
    except OSError:
        return False
    return pid_alive(pid) and str(config).encode() in cmdline
