"""Run a command in a network of its own that reaches only some of the lab's sshds, as an
operator's machine reaches a cluster's first node but not the network its nodes share.

`unshare -rn` gives the command a network namespace with nothing in it (a user
namespace makes that possible without root). Inside, a relay listens on each address
to be reachable and passes every connection through a Unix socket (a file path, which
both namespaces see) to a relay out here, which connects to the real sshd. Any other
address is refused inside; the real sshds, outside, still reach each other, so a jump
through a reachable one works.
"""

from __future__ import annotations

import functools
import json
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path


def available() -> bool:
    """Whether this machine lets an unprivileged user make a network namespace."""
    if not shutil.which("unshare") or not shutil.which("ip"):
        return False
    done = subprocess.run(["unshare", "-rn", "ip", "link", "set", "lo", "up"], capture_output=True)
    return done.returncode == 0


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _relay(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
    """Each connection accepted, joined both ways to a new one `connect` opens."""
    while True:
        try:
            accepted, _ = listener.accept()
        except OSError:
            return  # closed: the run is over
        onward = connect()
        for source, sink in ((accepted, onward), (onward, accepted)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _unix(path: str) -> socket.socket:
    connection = socket.socket(socket.AF_UNIX)
    connection.connect(path)
    return connection


def inside(routes: list[tuple[str, int, str]], argv: list[str]) -> int:
    """In the new namespace: bring up its loopback, relay each address to its Unix socket,
    run argv."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for address, port, path in routes:
        listener = socket.create_server((address, port))
        threading.Thread(
            target=_relay, args=(listener, functools.partial(_unix, path)), daemon=True
        ).start()
    return subprocess.run(argv).returncode


def run_isolated(
    argv: list[str],
    reachable: list[tuple[str, int]],
    work: Path,
    env: dict[str, str],
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run argv where only `reachable` (address, port) pairs answer."""
    listeners, routes = [], []
    for index, (address, port) in enumerate(reachable):
        path = work / f"relay-{index}.sock"
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(path))
        listener.listen()
        listeners.append(listener)
        routes.append((address, port, str(path)))
        connect = functools.partial(socket.create_connection, (address, port))
        threading.Thread(target=_relay, args=(listener, connect), daemon=True).start()
    try:
        return subprocess.run(
            ["unshare", "-rn", sys.executable, __file__, json.dumps(routes), *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
    finally:
        for listener, (_, _, path) in zip(listeners, routes, strict=True):
            listener.close()
            Path(path).unlink()


if __name__ == "__main__":
    sys.exit(inside(json.loads(sys.argv[1]), sys.argv[2:]))
