"""A container reached through its Proxmox host with `pct exec`.

It owns no socket: it wraps the host's SSH transport, as pyinfra's container
connectors do. `pct exec` runs argv without a shell inside the container, so
callers that need pipes pass `/bin/sh -c SCRIPT`; the argv is quoted once, by
the host transport, for the host's login shell.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.errors import TransportError
from orchestrator.transport.base import Result, Stream, Transport

# pct's own failures exit 255 with one of these; a command's 255 has neither.
PCT_FAILURE = re.compile(rb"container '\d+' not running|Configuration file .* does not exist")


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
        if result.exit_code == 255 and PCT_FAILURE.search(result.stderr):
            hint = (
                f"start it on {self.host.label} with: {self.pct_path} start {self.vmid}"
                if b"not running" in result.stderr
                else f"check the inventory's vmid: {self.host.label} has no container {self.vmid}"
            )
            raise TransportError(self.label, f"pct exec {self.vmid}", result.error_text, hint)
        return Result(tuple(argv), result.exit_code, result.stdout, result.stderr)

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> Stream:
        """Containers are reached over the host's network: the host opens the stream."""
        return self.host.open_stream(address, port, timeout)
