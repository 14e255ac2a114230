"""A gate paused for a decision, its pure parts: the decision file as read, when the
pause starts, and how each poll ends it (a decision, a timeout, a stop request, a lost
lock), as tables."""

from __future__ import annotations

import json

import pytest

from orchestrator.container.pause import Decision, commands, parse
from orchestrator.transaction.decision import Judged, PausePoll, pause_ends, pauses

RUN = "20261204T220000Z-abcdef"
PATH = "/var/lib/orch/qwen/decision.json"


def raw(**fields: object) -> bytes:
    return json.dumps(
        {"run_id": RUN, "choice": "promote", "by": "ops@ctl", "at": "t", **fields}
    ).encode()


@pytest.mark.parametrize("choice", ["promote", "abort", "retry"])
def test_a_decision_file_reads_as_the_decision(choice: str) -> None:
    assert parse(raw(choice=choice), PATH) == Decision(RUN, choice, "ops@ctl", "t")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "not a decision"),
        (b"{", "not a decision"),
        (b"[]", "not a decision"),
        (json.dumps({"run_id": RUN}).encode(), "KeyError"),
        (raw(choice="rollback"), "choice 'rollback' is none of promote, abort, retry"),
    ],
)
def test_a_decision_file_that_is_not_one_says_what_is_wrong(data: bytes, says: str) -> None:
    problem = parse(data, PATH)
    assert isinstance(problem, str) and problem.startswith(PATH) and says in problem


@pytest.mark.parametrize(
    ("gate", "on_inconclusive", "cancelled", "paused"),
    [
        (Judged("inconclusive", True), "pause", False, True),
        (Judged("inconclusive", True), "rollback", False, False),
        (Judged("inconclusive", True), "keep", False, False),
        (Judged("inconclusive", False), "pause", False, False),  # a dead server: no pause
        (Judged("inconclusive", True), "pause", True, False),  # a stop request: go back
        (Judged("fail", True), "pause", False, False),
        (Judged("pass", True), "pause", False, False),
    ],
)
def test_only_an_inconclusive_gate_of_a_live_server_pauses(
    gate: Judged, on_inconclusive: str, cancelled: bool, paused: bool
) -> None:
    assert pauses(gate, on_inconclusive, cancelled) is paused  # type: ignore[arg-type]


MINE = Decision(RUN, "promote", "ops@ctl", "t1")
RETRY = Decision(RUN, "retry", "ops@ctl", "t1")


def poll(**given: object) -> PausePoll:
    facts: dict[str, object] = {
        "run_id": RUN,
        "found": None,
        "waited": 10.0,
        "timeout": 60.0,
        "cancelled": False,
        "lost": None,
        "at": "now",
    }
    return PausePoll(**{**facts, **given})  # type: ignore[arg-type]


def abort(why: str) -> Decision:
    return Decision(RUN, "abort", f"orch ({why})", "now")


@pytest.mark.parametrize(
    ("polled", "ends"),
    [
        (poll(), None),
        (poll(found=MINE), MINE),
        (
            poll(found=Decision(RUN, "retry", "ops@ctl", "t1")),
            Decision(RUN, "retry", "ops@ctl", "t1"),
        ),
        (poll(found=Decision("an-earlier-run", "promote", "ops@ctl", "t0")), None),
        (poll(found="decision.json: not a decision"), None),
        (poll(waited=59.9), None),
        (poll(waited=60.0), abort("no decision within the pause timeout of 60 s")),
        (poll(waited=60.0, found=MINE), MINE),  # written before the timeout was seen
        (poll(cancelled=True, found=MINE), abort("a stop request ended the pause")),
        (
            poll(lost="the deploy lock was removed", found=MINE),
            abort("the deploy lock was removed"),
        ),
    ],
)
def test_each_poll_ends_the_pause_or_waits_on(polled: PausePoll, ends: Decision | None) -> None:
    assert pause_ends(polled) == ends


def test_the_commands_that_decide_run_as_printed() -> None:
    printed = commands("my playbooks/qwen.yaml", "inv.yaml", "ct200")
    assert printed == {
        "promote": "orch promote 'my playbooks/qwen.yaml' -i inv.yaml --limit ct200",
        "abort": "orch abort 'my playbooks/qwen.yaml' -i inv.yaml --limit ct200",
        "retry": "orch retry 'my playbooks/qwen.yaml' -i inv.yaml --limit ct200",
    }
