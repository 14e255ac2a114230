"""The decision after a gate, as tables: typed facts in, a typed decision out."""

from __future__ import annotations

import pytest

from orchestrator.transaction.decision import (
    GoBack,
    Judged,
    Keep,
    Settled,
    Switched,
    WentBack,
    admits,
    after_gate,
    settled,
)

PASS = Judged("pass", True, "clears 2.5")
FAIL = Judged("fail", True, "below 2.5")
UNSURE = Judged("inconclusive", True, "too few drafts")
UNSURE_DEAD = Judged("inconclusive", False, "no drafts measured")
FAIL_UNGATED = Judged("fail", False, "server did not become ready", gated=False)
PROMOTED = Judged("inconclusive", True, "too few drafts", promoted=True)
PROMOTED_DEAD = Judged("inconclusive", False, "no drafts measured", promoted=True)
FAIL_PROMOTED = Judged("fail", True, "died after its pause", promoted=True)
"""A promoted gate whose server was then found dead (the settle after a promote)."""
NEW, OLD, OLDER = "new000000000", "old000000000", "older0000000"


@pytest.mark.parametrize(
    ("gate", "on_inconclusive", "admitted"),
    [
        (PASS, "rollback", True),
        (PASS, "keep", True),
        (FAIL, "rollback", False),
        (FAIL, "keep", False),
        (UNSURE, "rollback", False),
        (UNSURE, "keep", True),
        (UNSURE_DEAD, "rollback", False),
        (UNSURE_DEAD, "keep", False),
        (FAIL_UNGATED, "keep", False),
        (UNSURE, "pause", False),
        (PROMOTED, "pause", True),
        (PROMOTED_DEAD, "pause", False),
        (FAIL_PROMOTED, "pause", False),
    ],
)
def test_admits(gate: Judged, on_inconclusive: str, admitted: bool) -> None:
    assert admits(gate, on_inconclusive) is admitted  # type: ignore[arg-type]


def keep(result: str, previous: str | None, prune: set[str] | None, stays: bool = False) -> Keep:
    return Keep(result, previous, frozenset(prune) if prune is not None else None, stays)  # type: ignore[arg-type]


def back(
    to: str | None, prune: set[str] | None, restore: bool = False, stopped_on: str | None = None
) -> GoBack:
    return GoBack(to, frozenset(prune) if prune is not None else None, restore, stopped_on)


@pytest.mark.parametrize(
    ("switched", "decision"),
    [
        # deploy over a running release
        (Switched("deploy", NEW, OLD, PASS, "rollback"), keep("deployed", OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, PASS, "keep"), keep("deployed", OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, FAIL, "rollback"), back(OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, FAIL, "keep"), back(OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, UNSURE, "rollback"), back(OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, UNSURE, "keep"), keep("deployed", OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, UNSURE_DEAD, "keep"), back(OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, UNSURE, "pause"), back(OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, PROMOTED, "pause"), keep("deployed", OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, PROMOTED, "pause", cancelled=True), back(OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, UNSURE_DEAD, "rollback"), back(OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, FAIL_UNGATED, "keep"), back(OLD, {NEW, OLD})),
        # a stop request: a pass still stays, an admitted inconclusive does not
        (Switched("deploy", NEW, OLD, PASS, "keep", True), keep("deployed", OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, UNSURE, "keep", True), back(OLD, {NEW, OLD})),
        (Switched("deploy", NEW, OLD, FAIL, "rollback", True), back(OLD, {NEW, OLD})),
        # the first deploy: nothing to go back to
        (Switched("deploy", NEW, None, PASS, "rollback"), keep("deployed", None, {NEW, ""})),
        (Switched("deploy", NEW, None, FAIL, "rollback"), back(None, {NEW, ""})),
        (Switched("deploy", NEW, None, UNSURE, "keep"), keep("deployed", None, {NEW, ""})),
        (Switched("deploy", NEW, None, UNSURE, "rollback"), back(None, {NEW, ""})),
        # a redeploy of the current release (its server was stopped): one further back
        (
            Switched("deploy", NEW, NEW, PASS, "rollback", earlier=OLD),
            keep("deployed", None, {NEW}),
        ),
        (Switched("deploy", NEW, NEW, FAIL, "rollback", earlier=OLD), back(OLD, {NEW, OLD})),
        (Switched("deploy", NEW, NEW, FAIL, "rollback", earlier=None), back(None, {NEW, ""})),
        # --replace: another playbook's server stopped for this switch
        (
            Switched("deploy", NEW, OLD, PASS, "rollback", replacing=True),
            keep("deployed", OLD, {NEW, OLD}, stays=True),
        ),
        (
            Switched("deploy", NEW, OLD, FAIL, "rollback", replacing=True),
            back(OLD, {NEW, OLD}, restore=True),
        ),
        (
            # its own release stays current, stopped as before; kept from pruning
            Switched("deploy", NEW, OLD, FAIL, "rollback", replacing=True, was_serving=False),
            back(None, {NEW, OLD}, restore=True, stopped_on=OLD),
        ),
        (
            Switched("deploy", NEW, OLD, UNSURE, "keep", True, replacing=True, was_serving=False),
            back(None, {NEW, OLD}, restore=True, stopped_on=OLD),
        ),
        (
            Switched("deploy", NEW, NEW, FAIL, "rollback", replacing=True, was_serving=False),
            back(None, {NEW}, restore=True, stopped_on=NEW),
        ),
        (
            Switched("deploy", NEW, None, FAIL, "rollback", replacing=True, was_serving=False),
            back(None, {NEW, ""}, restore=True),
        ),
        # rollback: nothing is pruned
        (Switched("rollback", OLDER, OLD, PASS, "rollback"), keep("rolled_back", OLD, None)),
        (Switched("rollback", OLDER, OLD, FAIL, "rollback"), back(OLD, None)),
        (Switched("rollback", OLDER, OLD, UNSURE, "keep"), keep("rolled_back", OLD, None)),
        (Switched("rollback", OLDER, OLD, UNSURE, "rollback"), back(OLD, None)),
        (Switched("rollback", OLDER, OLD, UNSURE, "keep", True), back(OLD, None)),
        (Switched("rollback", OLDER, None, FAIL, "rollback"), back(None, None)),
        (Switched("rollback", OLDER, None, PASS, "keep"), keep("rolled_back", None, None)),
    ],
)
def test_after_gate(switched: Switched, decision: Keep | GoBack) -> None:
    assert after_gate(switched) == decision


ROLLED = "gate fail: below 2.5"


@pytest.mark.parametrize(
    ("went", "ending"),
    [
        (WentBack("deploy", FAIL, OLD, PASS, "rollback"), Settled("rolled_back", 1, ROLLED)),
        (WentBack("rollback", FAIL, OLD, PASS, "rollback"), Settled("failed", 1, ROLLED)),
        (WentBack("deploy", FAIL, None, None, "rollback"), Settled("failed", 1, ROLLED)),
        (
            WentBack("deploy", FAIL, OLD, FAIL, "rollback"),
            Settled("failed", 3, f"{ROLLED}; ROLLBACK to {OLD} did not pass either: below 2.5"),
        ),
        (
            WentBack("deploy", FAIL, OLD, FAIL_UNGATED, "rollback"),
            Settled(
                "failed", 3, f"{ROLLED}; ROLLBACK to {OLD} failed: server did not become ready"
            ),
        ),
        (WentBack("deploy", FAIL, OLD, UNSURE, "keep"), Settled("rolled_back", 1, ROLLED)),
        (
            WentBack("deploy", FAIL, OLD, UNSURE, "rollback"),
            Settled(
                "failed", 3, f"{ROLLED}; ROLLBACK to {OLD} did not pass either: too few drafts"
            ),
        ),
        (
            WentBack("deploy", FAIL, None, None, "rollback", ("other", "restored", None)),
            Settled("rolled_back", 1, f"{ROLLED}; other restored"),
        ),
        (
            WentBack(
                "deploy", FAIL, None, None, "rollback", ("other", "restored", None), stopped_on=OLD
            ),
            Settled(
                "rolled_back",
                1,
                f"{ROLLED}; back on {OLD} (stopped, as before this run); other restored",
            ),
        ),
        (
            WentBack(
                "deploy", FAIL, None, None, "rollback", ("other", "failed", "dead"), stopped_on=OLD
            ),
            Settled(
                "failed",
                3,
                f"{ROLLED}; back on {OLD} (stopped, as before this run); "
                "RESTORE of other failed: dead",
            ),
        ),
        (
            WentBack(
                "deploy", FAIL, None, None, "keep", ("other", "restored", None), True, 130, OLD
            ),
            Settled(
                "interrupted",
                130,
                f"interrupted before its gate passed; back on {OLD} (stopped, as before this "
                "run); other restored",
            ),
        ),
        (
            WentBack("deploy", FAIL, None, None, "rollback", ("other", "failed", "dead")),
            Settled("failed", 3, f"{ROLLED}; RESTORE of other failed: dead"),
        ),
        (
            WentBack("deploy", UNSURE, OLD, PASS, "keep", None, True, 143),
            Settled("interrupted", 143, f"interrupted before its gate passed; back on {OLD}"),
        ),
        (
            WentBack("deploy", FAIL, None, None, "keep", None, True, 130),
            Settled(
                "interrupted",
                130,
                "interrupted before its gate passed; its server stopped (nothing to go back to)",
            ),
        ),
        (
            WentBack("deploy", FAIL, None, None, "keep", ("other", "restored", None), True, 143),
            Settled("interrupted", 143, "interrupted before its gate passed; other restored"),
        ),
        (
            WentBack("rollback", FAIL, OLD, FAIL, "keep", None, True, 130),
            Settled("interrupted", 130, f"interrupted before its gate passed; back on {OLD}"),
        ),
    ],
)
def test_settled(went: WentBack, ending: Settled) -> None:
    assert settled(went) == ending
