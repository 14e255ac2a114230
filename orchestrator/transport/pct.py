"""A container reached through its Proxmox host with `pct exec`.

It owns no socket: it wraps the host's SSH transport, as pyinfra's container
connectors do. `pct exec` runs argv without a shell inside the container, so
callers that need pipes pass `/bin/sh -c SCRIPT`; the argv is quoted once, by
the host transport, for the host's login shell.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.errors import TransportError
from orchestrator.transport.base import Result, Stream, Transport

# pct's own failures are Perl dies: the message is the last line on stderr, and the
# exit status is errno when one is set, else 255 (a wrong vmid exits 2, ENOENT), so
# the message decides, whatever the status but 126 and 127 (lxc-attach could not run
# the command) and 0: docs/field-notes/proxmox.md ("pct's own failures").
NO_CONFIG = re.compile(r"Configuration file '\S*/lxc/\d+\.conf' does not exist")
NOT_RUNNING = re.compile(r"container '\d+' not running!")
NOT_ROOT = re.compile(r"please run as root")
COMMAND_STATUSES = (0, 126, 127)


@dataclass(frozen=True)
class PctRefusal:
    """pct refused before running anything: why, in the inventory's terms, and the fix."""

    reason: str
    hint: str


def pct_refusal(result: Result, host: str, pct_path: str, vmid: int) -> PctRefusal | None:
    """pct's own failure in `result` (of any pct command for `vmid` on `host`), or None."""
    if result.exit_code in COMMAND_STATUSES:
        return None
    lines = result.error_text.splitlines()
    said = lines[-1].strip() if lines else ""
    if NO_CONFIG.fullmatch(said):
        return PctRefusal(
            f"no container {vmid} on {host} (pct: {said})",
            f"check the inventory's vmid: pct list on {host} shows its containers",
        )
    if NOT_RUNNING.fullmatch(said):
        return PctRefusal(
            f"CT {vmid} on {host} is not running (pct: {said})",
            f"start it on {host} with: {pct_path} start {vmid}",
        )
    if NOT_ROOT.fullmatch(said):
        return PctRefusal(
            f"pct on {host} needs root (pct: {said})",
            f"log in to {host} as root, or set become: sudo for it in the inventory",
        )
    return None


class PctTransport:
    def __init__(self, label: str, host: Transport, pct_path: str, vmid: int) -> None:
        self.label = label
        self.host = host
        self.pct_path = pct_path
        self.vmid = vmid

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        wrapped = [self.pct_path, "exec", str(self.vmid), "--", *argv]
        result = self.host.run(wrapped, stdin, timeout)
        refusal = pct_refusal(result, self.host.label, self.pct_path, self.vmid)
        if refusal:
            raise TransportError(self.label, f"pct exec {self.vmid}", refusal.reason, refusal.hint)
        return Result(tuple(argv), result.exit_code, result.stdout, result.stderr)

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> Stream:
        """Containers are reached over the host's network: the host opens the stream."""
        return self.host.open_stream(address, port, timeout)
