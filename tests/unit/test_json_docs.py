"""Every example document in docs/json.md holds to the contract the code prints
(orchestrator/documents/), so the page and the code cannot drift apart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fleets import Fleet

from orchestrator.contract import Document, jsonable
from orchestrator.fleet.status import status
from orchestrator.gate import GateReport
from orchestrator.metrics.assess import GateCriteria, assess

PAGE = Path(__file__).parents[2] / "docs" / "json.md"
EXAMPLES = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", PAGE.read_text(), re.S)]


def test_the_page_has_an_example_of_each_kind_it_shows() -> None:
    kinds = {e["kind"] for e in EXAMPLES}
    assert len(EXAMPLES) >= 15
    assert {"DeployRun", "Status", "Verify", "Findings", "Doctor", "Error"} <= kinds


@pytest.mark.parametrize(
    "example", EXAMPLES, ids=[f"{i}-{e['kind']}" for i, e in enumerate(EXAMPLES)]
)
def test_each_example_validates_against_the_contract(example: dict[str, Any]) -> None:
    Document.model_validate(example)
    assert list(example)[:2] == ["kind", "api_version"]
    for target in example.get("targets") or []:
        assert "container" not in target


def test_the_status_examples_have_the_fields_status_prints() -> None:
    """A field added to or dropped from `status` must be added to or dropped from the page."""
    fleet = Fleet()
    fleet.deployed("ct200")
    printed = jsonable(status(fleet.inputs, fleet.connect)[0])
    fields = set(printed["targets"][0])
    examples = [e for e in EXAMPLES if e["kind"] == "Status"]
    assert examples
    for example in examples:
        assert set(example) == set(printed)
        for target in example["targets"]:
            assert set(target) == fields


def test_the_gate_fields_the_examples_show_are_the_ones_a_gate_report_has() -> None:
    printed = set(jsonable(GateReport(assess([], GateCriteria(2.5)))))
    shown = [
        target["gate"]
        for example in EXAMPLES
        if example["kind"] == "DeployRun"
        for target in example.get("targets") or []
        if target.get("gate")
    ]
    assert shown
    for gate in shown:
        assert set(gate) - {"..."} <= printed
    assert {"source", "source_note"} <= set(shown[0])
