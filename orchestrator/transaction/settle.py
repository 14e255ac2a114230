"""After the verdict, before the release is kept: the server must go on serving.

The gate decides in seconds, so a server that dies right after it was judged
would be kept dead. For `gate.settle_seconds` its /health is asked about once a
second (a request through the connection, no command on the container); its process
is looked at when /health fails (to say why) and at the end, when one probe request
must be answered too. What breaks on the way is why the release is not kept.
"""

from __future__ import annotations

from orchestrator.container.server import HEALTH_SECONDS, WATCH_SECONDS, Server
from orchestrator.deadline import Clock, Deadline
from orchestrator.errors import OrchError, StreamsBusy
from orchestrator.probes.endpoints import Endpoint
from orchestrator.probes.sampling import request_fields
from orchestrator.release import GateTarget
from orchestrator.secrets import ProbeKey
from orchestrator.transport import http

LOOK_SECONDS = 1.0
PROBE_SECONDS = 60.0
PROBE_PROMPT = "Hello"


def unsettled(
    server: Server, pid: int, target: GateTarget, key: ProbeKey | None, clock: Clock
) -> str | None:
    """None when the server started as `pid` serves through the settle time; else why not.
    A look that found every stream of orch's own connection taken (other containers'
    gates on the same host) learned nothing of the server and is made again; the last
    one, for as long as its probe request may take."""
    deadline = Deadline.after(target.gate.settle_seconds, clock=clock)
    started = clock.now()
    patience: Deadline | None = None
    while True:
        last = deadline.expired()
        try:
            problem = _look(server, pid, target, key, last)
        except StreamsBusy as busy:
            if last:
                patience = patience or Deadline.after(PROBE_SECONDS, clock=clock)
                if patience.expired():
                    return f"the server could not be reached ({busy}) after its gate passed"
                patience.pause(LOOK_SECONDS)
            else:
                deadline.pause(LOOK_SECONDS)
            continue
        if problem:
            return f"{problem} {clock.now() - started:.0f} s after its gate passed"
        if last:
            return None
        deadline.pause(LOOK_SECONDS)


def _look(
    server: Server, pid: int, target: GateTarget, key: ProbeKey | None, last: bool
) -> str | None:
    try:
        status = server.health(HEALTH_SECONDS)
        if (status != 200 or last) and _exited(server, pid):
            return "the server exited"
        if status != 200:
            return f"the server answered /health with HTTP {status}"
        if not last:
            return None
        endpoint = Endpoint(target.gate.probe.endpoints[0])
        payload = endpoint.payload(
            target.served_name, PROBE_PROMPT, 1, request_fields(target.gate.probe.sampling)
        )
        headers = key.header() if key else None
        response = http.request(
            server.transport,
            server.address,
            server.port,
            "POST",
            endpoint.path,
            payload,
            timeout=PROBE_SECONDS,
            headers=headers,
        )
    except StreamsBusy:
        raise
    except OrchError as exc:
        return _unreachable(server, pid, exc)
    if response.status != 200:
        return f"the server answered a probe request with HTTP {response.status}"
    return None


def _unreachable(server: Server, pid: int, error: OrchError) -> str:
    """Why a server could not be reached: it exited (its process says so), else the error."""
    try:
        if _exited(server, pid):
            return "the server exited"
    except OrchError:
        pass
    return f"the server could not be reached ({error})"


def _exited(server: Server, pid: int) -> bool:
    """The server started as `pid` is no longer the recorded, running one."""
    state, _ = server.watch(WATCH_SECONDS)
    return not state.running or state.pid != pid
