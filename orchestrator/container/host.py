"""The Proxmox host a container runs on, as `orch doctor` reads it: `pct status` of
the container and the host sshd's session limits."""

from __future__ import annotations

from orchestrator.container.shell import builder, reading, script

SSHD = "/usr/sbin/sshd"


@builder
def container_status(pct: str, vmid: int) -> list[str]:
    """On the Proxmox host: `status: running` or `status: stopped`."""
    return [pct, "status", str(vmid)]


@builder
def sshd_limits() -> list[str]:
    """The host sshd's session limits from its effective configuration (needs root)."""
    return script(f"{SSHD} -T 2>/dev/null | grep -i -E '^(maxsessions|maxstartups) '")


def parse_container_status(text: str) -> str:
    """`pct status VMID` -> `running`, `stopped`, ... (pct prints `status: WORD`)."""
    with reading("pct status", text):
        label, word = text.split(":", 1)
        if label.strip() != "status":
            raise ValueError("expected 'status: ...'")
        return word.strip()


def parse_sshd_limits(text: str) -> dict[str, str]:
    """`sshd -T` lines kept by sshd_limits -> {maxsessions: "10", ...}."""
    return {
        key.lower(): value.strip()
        for key, _, value in (line.partition(" ") for line in text.splitlines())
        if value
    }
