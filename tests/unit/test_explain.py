"""`orch explain` and the reference pages generated from the same schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator import explain
from orchestrator.cli import cli
from orchestrator.contract import Document
from orchestrator.playbook import check_settable

DOCS = Path(__file__).resolve().parent.parent.parent / "docs"


@pytest.mark.parametrize("root", sorted(explain.ROOTS))
def test_the_reference_pages_are_what_the_schemas_generate(root: str) -> None:
    written = (DOCS / f"{root}.md").read_text(encoding="utf-8")
    assert written == explain.markdown(root), (
        f"docs/{root}.md differs from the schema: run "
        f"`orch explain --markdown {root} > docs/{root}.md`"
    )


@pytest.mark.parametrize("root", sorted(explain.ROOTS))
def test_every_field_says_what_it_does(root: str) -> None:
    entries = explain.entries(root)
    assert len(entries) > 20
    undescribed = [e.path for e in entries if len(e.description.split()) < 3]
    assert undescribed == []


def test_explain_prints_type_default_and_meaning() -> None:
    result = CliRunner().invoke(cli, ["explain", "gate.min_drafts"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:3] == [
        "FIELD:    gate.min_drafts (playbook)",
        "TYPE:     integer 1..1000000",
        "DEFAULT:  200",
    ]
    assert "before it may pass or fail" in result.output


def test_a_section_lists_its_fields() -> None:
    result = CliRunner().invoke(cli, ["explain", "gate.probe"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    listed = [line.split()[0] for line in lines if line.startswith("  ") and line[2] != " "]
    assert listed == [
        "prompts",
        "max_tokens",
        "concurrency",
        "max_requests",
        "scrape_interval",
        "endpoints",
        "chat_template_kwargs",
        "sampling",
    ]
    assert "<integer 1..64> (default 4)" in result.output


def test_an_unknown_path_is_bad_input_with_the_nearest_fields() -> None:
    result = CliRunner().invoke(cli, ["explain", "gate.min_draft"])
    assert result.exit_code == 2
    assert "no field 'gate.min_draft'; did you mean: gate.min_drafts?" in result.output
    bare = CliRunner().invoke(cli, ["explain", "min_drafts"])
    assert bare.exit_code == 2 and "did you mean: gate.min_drafts" in bare.output


@pytest.mark.parametrize(
    ("path", "found"),
    [
        ("hosts.pve1.address", "hosts.<name>.address"),
        ("inventory.hosts.address", "hosts.<name>.address"),
        ("containers.ct200", "containers"),
        ("containers.<name>.ssh.port", "containers.<name>.ssh.port"),
        ("playbook.rollout.canary", "rollout.canary"),
        ("defaults.vars.nvidia_smi", "defaults.vars.nvidia_smi"),
    ],
)
def test_paths_name_fields_with_or_without_a_key(path: str, found: str) -> None:
    entry = explain.find(path)
    assert entry is not None and entry.path == found


def test_a_misspelt_field_under_names_is_not_taken_for_a_name() -> None:
    with pytest.raises(explain.InputError, match=r"did you mean: hosts\.address"):
        explain.find("hosts.pve1.adress")


def test_every_playbook_path_explained_can_be_set() -> None:
    for entry in explain.entries("playbook"):
        parts = tuple(entry.path.split("."))
        check_settable(explain.Playbook, parts, f"{entry.path}=x")  # raises when unknown


def test_defaults_are_the_schema_defaults() -> None:
    by_path = {e.path: e for e in explain.entries("playbook")}
    assert by_path["gate.probe.endpoints"].default == '["completions", "chat"]'
    assert by_path["server.port"].default == "8000"
    assert by_path["gate.min_position1_acceptance"].type_text == "(number 0..1) or null"
    assert by_path["name"].required and by_path["name"].default is None


def test_json_is_one_document_of_the_contract() -> None:
    result = CliRunner().invoke(cli, ["explain", "rollout", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    Document.model_validate(document)
    assert list(document)[:2] == ["kind", "api_version"] and document["kind"] == "Explain"
    assert document["field"]["path"] == "rollout"
    assert [f["path"] for f in document["fields"]] == [
        "rollout.canary",
        "rollout.parallel",
        "rollout.max_failures",
        "rollout.pause",
    ]
