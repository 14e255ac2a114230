"""`orch status`'s judgement as tables: a container's state from what was read of it
(StatusFacts), whether that state is as someone meant it, and the fleet's state from
its containers'. Pure functions: no transport."""

from __future__ import annotations

import pytest

from orchestrator.contract import TargetState
from orchestrator.documents.fleet import AuditSummary, Deploying
from orchestrator.fleet.status import STATE_ORDER, StatusFacts, as_meant, fleet_state, target_state

RUN = Deploying(run_id="20261201T100000Z-aaaaaa", step=None, owner="ops@laptop", elapsed=1.0)


def facts(
    release: str | None = "r1",
    missing: bool = False,
    server: str = "running",
    deploying: Deploying | None = None,
    interrupted: str | None = None,
    health: int | None = 200,
) -> StatusFacts:
    return StatusFacts(release, missing, server, deploying, interrupted, health)


@pytest.mark.parametrize(
    ("read", "state"),
    [
        (facts(), "serving"),
        (facts(health=503), "unhealthy"),
        (facts(health=None), "unhealthy"),
        (facts(server="stopped", health=None), "crashed"),
        (facts(server="none", health=None), "stopped"),
        (facts(release=None, server="none", health=None), "nothing_deployed"),
        (facts(release=None, server="stopped", health=None), "nothing_deployed"),
        (facts(deploying=RUN), "deploying"),
        (facts(release=None, server="none", deploying=RUN), "deploying"),
        (facts(server="stopped", deploying=RUN), "deploying"),
        (facts(interrupted="run R stopped in its switch"), "interrupted"),
        (facts(interrupted="run R stopped in its switch", deploying=RUN), "interrupted"),
        (facts(interrupted="run R", missing=True, server="none"), "interrupted"),
        (facts(missing=True), "unhealthy"),
        (facts(missing=True, health=503), "unhealthy"),
        (facts(missing=True, server="stopped", health=None), "stopped"),
        (facts(missing=True, server="none", health=None), "stopped"),
        (facts(missing=True, deploying=RUN), "unhealthy"),
        (facts(missing=True, server="none", deploying=RUN), "stopped"),
    ],
)
def test_a_containers_state_from_what_was_read_of_it(read: StatusFacts, state: str) -> None:
    assert target_state(read) == state


STOP_RUN: AuditSummary = {"action": "stop", "result": "stopped", "run_id": "r"}
DEPLOY_RUN: AuditSummary = {"action": "deploy", "result": "deployed", "run_id": "r"}
INTERRUPTED_STOP: AuditSummary = {"action": "recover", "result": "stopped"}


@pytest.mark.parametrize(
    ("state", "last_run", "meant"),
    [
        ("serving", None, True),
        ("serving", DEPLOY_RUN, True),
        ("nothing_deployed", None, True),
        ("deploying", DEPLOY_RUN, True),
        ("stopped", STOP_RUN, True),
        ("stopped", INTERRUPTED_STOP, True),
        ("stopped", DEPLOY_RUN, False),
        ("stopped", None, False),
        ("crashed", STOP_RUN, False),
        ("crashed", DEPLOY_RUN, False),
        ("unhealthy", STOP_RUN, False),
        ("unhealthy", None, False),
        ("interrupted", STOP_RUN, False),
        ("unreachable", None, False),
    ],
)
def test_a_state_is_as_meant_when_no_one_needs_to_look(
    state: TargetState, last_run: AuditSummary, meant: bool
) -> None:
    assert as_meant(state, last_run) is meant


@pytest.mark.parametrize(
    ("states", "fleet"),
    [
        ([], "nothing_deployed"),
        (["nothing_deployed"], "nothing_deployed"),
        (["nothing_deployed", "nothing_deployed"], "nothing_deployed"),
        (["serving", "nothing_deployed"], "serving"),
        (["serving", "serving"], "serving"),
        (["serving", "deploying"], "deploying"),
        (["deploying", "unhealthy"], "unhealthy"),
        (["unhealthy", "stopped"], "stopped"),
        (["stopped", "crashed"], "crashed"),
        (["stopped", "unreachable"], "unreachable"),
        (["serving", "unreachable", "interrupted"], "interrupted"),
    ],
)
def test_the_fleets_state_is_its_most_pressing_containers(
    states: list[TargetState], fleet: str
) -> None:
    assert fleet_state(states) == fleet


def test_every_state_has_its_place_in_the_order() -> None:
    assert set(STATE_ORDER) == set(TargetState.__args__)  # type: ignore[attr-defined]
