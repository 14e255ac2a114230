"""`orch report` of a real `orch tune` on the stand-in lab: the tune is recorded in the
history under its own run id, and its HTML page draws the chart `orch tune` printed."""

from __future__ import annotations

import pytest
from labdeploy import deploy
from labtools import FAST, LabHandle
from tunepages import check_tune_page

pytestmark = pytest.mark.lab

SHALLOW = ["--set", "gate.min_mean_acceptance_length=2"]
"""Depth 2 accepts about 2.4 on the stand-in: under the playbook's 2.5 it would fail."""


def test_the_report_of_a_tune_draws_its_chart(lab: LabHandle) -> None:
    """A baseline first, so each depth's levels have a speedup: the chart draws those
    (tests/unit/test_tunepage.py draws a recorded tune's total tokens/s)."""
    code, first = deploy(lab, "--limit", "ct200", *SHALLOW)
    assert code == 0, first
    measured = lab.orch(
        "baseline", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct200", *FAST, *SHALLOW
    )
    assert measured.code == 0, measured
    tuned = lab.orch(
        "tune", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct200", *FAST,
        *SHALLOW, "--num-speculative-tokens", "2,4",
        "--json", timeout=600,
    )  # fmt: skip
    assert tuned.code == 0, tuned.stdout + tuned.stderr
    document = tuned.json
    import json
    import pathlib

    pathlib.Path("/tmp/v2sr-tune.json").write_text(json.dumps(document, indent=1))  # TEMP
    recorded = lab.orch("history", "--json").json["runs"]
    assert [r["command"] for r in recorded if r["run_id"] == document["run_id"]] == ["tune"]

    page = lab.orch("report", document["run_id"], "--format", "html")
    assert page.code == 0, page.stderr
    check_tune_page(page.stdout, document)
    assert all(level["speedup"] for step in document["steps"] for level in step["levels"])
    assert "1 streams, speedup" in page.stdout and "8 streams, speedup" in page.stdout
