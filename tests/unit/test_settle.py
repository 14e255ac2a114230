"""The settle after the verdict: a server that stops serving is not kept, and orch's own
connection being full (every stream taken by other containers' gates on the same host)
is never read as the server failing."""

from __future__ import annotations

import threading

import pytest
from clocks import FakeClock
from examples import EXAMPLE, PLAYBOOK
from scripted import SERVER_PID, ScriptedContainer, serving

from orchestrator.container.server import Server
from orchestrator.errors import StreamsBusy
from orchestrator.inventory import load_inventory
from orchestrator.plan import plan_deploy
from orchestrator.playbook import load_playbook
from orchestrator.release import GateTarget
from orchestrator.transaction.settle import PROBE_SECONDS, unsettled

SETTLE = ["gate.settle_seconds=5"]


def settled_on(container: ScriptedContainer, busy_opens: int, clock: FakeClock) -> str | None:
    """What the settle says of the container's server when its first `busy_opens` stream
    opens find every stream of the connection taken."""
    playbook = load_playbook(PLAYBOOK, SETTLE)
    plan = plan_deploy(playbook, load_inventory(EXAMPLE))[0]
    serving(container.transport, playbook.target.served_name)
    opened = container.transport.open_stream
    left = [busy_opens]

    def open_stream(address: str, port: int, timeout: float = 10.0):  # type: ignore[no-untyped-def]
        if left[0] > 0:
            left[0] -= 1
            clock.sleep(timeout, threading.Event())  # the wait for a free stream
            raise StreamsBusy(container.name, f"connecting to {address}:{port}", "all busy")
        return opened(address, port, timeout)

    container.transport.open_stream = open_stream  # type: ignore[method-assign]
    server = Server(container.transport, plan.layout, "127.0.0.1", playbook.server.port)
    return unsettled(server, SERVER_PID, GateTarget.of(playbook), None, clock)


@pytest.fixture
def container() -> ScriptedContainer:
    playbook = load_playbook(PLAYBOOK, SETTLE)
    plan = plan_deploy(playbook, load_inventory(EXAMPLE))[0]
    scripted = ScriptedContainer(plan.container, plan.layout)
    scripted.run_server()
    return scripted


def test_a_server_that_serves_through_the_settle_time_is_kept(
    container: ScriptedContainer,
) -> None:
    assert settled_on(container, 0, FakeClock()) is None
    assert ("POST", "/v1/completions") in container.transport.requests


def test_a_serving_server_is_asked_over_http_and_its_process_looked_at_once(
    container: ScriptedContainer,
) -> None:
    """Five seconds of /health, one command on the container: its process at the end."""
    assert settled_on(container, 0, FakeClock()) is None
    assert container.transport.requests.count(("GET", "/health")) >= 5
    assert len(container.transport.calls) == 1


@pytest.mark.parametrize("busy_opens", [1, 3, 6])
def test_a_full_connection_is_waited_out_not_taken_for_the_server_failing(
    container: ScriptedContainer, busy_opens: int
) -> None:
    """Busy looks, in the middle of the settle time or at its end, teach nothing: the
    server is looked at again, and the last look's probe request is still made."""
    assert settled_on(container, busy_opens, FakeClock()) is None
    assert ("POST", "/v1/completions") in container.transport.requests


def test_a_connection_full_for_longer_than_a_probe_may_take_is_a_failure(
    container: ScriptedContainer,
) -> None:
    clock = FakeClock()
    started = clock.now()
    problem = settled_on(container, 10_000, clock)
    assert problem is not None and "could not be reached" in problem
    assert "all busy" in problem
    assert clock.now() - started >= PROBE_SECONDS


def test_a_server_that_exits_during_the_settle_time_is_not_kept(
    container: ScriptedContainer,
) -> None:
    container.server = SERVER_PID + 1
    problem = settled_on(container, 0, FakeClock())
    assert problem is not None and problem.startswith("the server exited")
