"""Every example document in docs/json.md holds to the contract the code prints
(orchestrator/documents/), so the page and the code cannot drift apart."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
from fleets import Fleet

from orchestrator import documents
from orchestrator.contract import Document, Kind, RunResult, jsonable
from orchestrator.documents import AnyDocument
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
    AnyDocument.model_validate(example)
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


def _kinds() -> dict[str, list[type[Document]]]:
    """Every document model under orchestrator/documents/, by the kind it prints."""
    for module in pkgutil.iter_modules(documents.__path__):
        importlib.import_module(f"{documents.__name__}.{module.name}")
    found: dict[str, list[type[Document]]] = {}
    pending = list(Document.__subclasses__())
    while pending:
        model = pending.pop()
        pending.extend(model.__subclasses__())
        kind = model.model_fields["kind"].annotation
        if get_origin(kind) is Literal:
            found.setdefault(get_args(kind)[0], []).append(model)
    return found


def test_every_kind_has_a_document_and_each_says_its_result_in_the_one_vocabulary() -> None:
    kinds = _kinds()
    assert set(kinds) == set(get_args(Kind))
    words = set(get_args(RunResult))
    for kind, models in kinds.items():
        for model in models:
            assert "result" in model.model_fields, kind
            annotation = model.model_fields["result"].annotation
            assert set(get_args(annotation)) <= words, (kind, annotation)
