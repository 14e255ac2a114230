"""A deploy stopped while its gate is paused for a decision (`gate.on_inconclusive:
pause`): a stop signal, or its lock removed by `orch unlock --force`, ends the pause as
an abort, so the run goes back to the gated release it replaced. The invariants are the
matrix's (faulttools)."""

from __future__ import annotations

import signal

import pytest
from faulttools import (
    NAME,
    NEW_RELEASE,
    Orch,
    RecordProperty,
    assert_invariants,
    assert_stopped_at_once,
    good_release,
)
from labtools import LabHandle

pytestmark = [pytest.mark.lab, pytest.mark.faults]

PAUSING = [
    *NEW_RELEASE,
    *("--set", "gate.min_drafts=1000000", "--set", "gate.time_budget=3"),
    *("--set", "gate.on_inconclusive=pause"),
]
"""A new release whose gate cannot measure enough drafts in its budget: inconclusive, of
a server that answered and drafted, which pauses."""


def paused(lab: LabHandle) -> Orch:
    run = Orch(lab, *PAUSING)
    run.wait_for_step("paused")
    return run


@pytest.mark.parametrize(("number", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_paused_deploy_stopped_goes_back_to_the_gated_release(
    lab: LabHandle, number: int, code: int, record_property: RecordProperty
) -> None:
    good, files = good_release(lab)
    run = paused(lab)
    run.signal(number)

    assert run.finish() == code, run.output
    assert_stopped_at_once(run, record_property)
    [target] = run.document["targets"]
    assert (target["result"], target["current"]) == ("interrupted", good), target["error"]
    assert_invariants(lab, good, files)


def test_a_paused_deploy_whose_lock_is_forced_away_rolls_back_and_says_why(
    lab: LabHandle,
) -> None:
    good, files = good_release(lab)
    run = paused(lab)
    forced = lab.orch("unlock", "qwen-dflash", "-i", str(lab.inventory), "--limit", NAME, "--force")
    assert forced.code == 0, forced.stdout + forced.stderr

    assert run.finish() == 3, run.output
    [target] = run.document["targets"]
    assert (target["result"], target["current"]) == ("rolled_back", good), target["error"]
    assert "orch unlock --force" in run.output
    assert_invariants(lab, good, files)
