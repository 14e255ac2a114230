"""What the command line promises a script: one JSON document for every `--json`
invocation, errors included, and the spellings people bring from Ansible and
kubectl. Through click's runner: no process, no network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from examples import EXAMPLE

from orchestrator.cli import cli
from orchestrator.contract import Document


def run(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli, list(args), env={"ORCH_INVENTORY": None})
    return done.exit_code, done.stdout, done.stderr


@pytest.fixture
def typo(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "hosts:\n  pve1: {address: 192.0.2.1}\n"
        "containers:\n  ct200: {vmid: 200, host: pve1, adress: 192.0.2.10}\n"
    )
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["status", "qwen-dflash", "-i", "TYPO", "--json"],
        ["deploy", "qwen-dflash", "-i", "TYPO", "--check", "-o", "json"],
        ["doctor", "qwen-dflash", "-i", "TYPO", "-ojson"],
        ["watch", "qwen-dflash", "-i", "TYPO", "-o", "json"],
    ],
)
def test_a_bad_inventory_gives_one_bad_input_document_naming_file_line_column_field(
    typo: Path, args: list[str]
) -> None:
    code, out, err = run(*[str(typo) if a == "TYPO" else a for a in args])
    assert code == 2
    document = json.loads(out)  # exactly one document: json.loads refuses trailing text
    Document.model_validate(document)
    assert (document["kind"], document["result"]) == ("Error", "bad_input")
    assert {
        "file": str(typo),
        "line": 4,
        "column": 34,
        "field": "containers.ct200.adress",
        "message": "unknown field (did you mean 'address'?)",
    } in document["errors"]
    assert "containers.ct200.adress: unknown field" in err  # people still read stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["status", "qwen-dflash", "-i", "missing.yaml", "--json"], "missing.yaml"),
        (["status", "qwen-dflash", "--json"], "--inventory"),
        (["status", "qwen-dflash", "-i", str(EXAMPLE), "--bogus", "--json"], "--bogus"),
        (["status", "no-such-playbook", "-i", str(EXAMPLE), "--json"], "no-such-playbook"),
        (["status", "qwen-dflash", "-i", str(EXAMPLE), "-l", "ct999", "--json"], "ct999"),
        (["watch", "qwen-dflash", "-i", str(EXAMPLE), "--window", "soon", "--json"], "--window"),
        (["history", "--since", "soon", "-o", "json"], "--since"),
    ],
)
def test_every_json_invocation_prints_one_document_even_when_it_stops_early(
    args: list[str], said: str
) -> None:
    code, out, _ = run(*args)
    assert code == 2
    document = json.loads(out)
    Document.model_validate(document)
    assert document["result"] == "bad_input" and said in document["message"]
    assert document["errors"] and all(e["message"] for e in document["errors"])


def test_without_json_an_error_prints_nothing_on_stdout(typo: Path) -> None:
    code, out, err = run("status", "qwen-dflash", "-i", str(typo))
    assert (code, out) == (2, "")
    assert err.startswith("error: ")


def test_a_missing_inventory_names_where_else_it_can_come_from() -> None:
    code, _, err = run("status", "qwen-dflash")
    assert code == 2
    assert "'-i' / '--inventory' (or set ORCH_INVENTORY, or `inventory:` in" in err


def test_ansible_and_kubectl_spellings_are_accepted() -> None:
    _, out, _ = run("deploy", "--help")
    for spelling in ("-C, --dry-run, --check", "-l, --limit", "-o, --output [json|table]"):
        assert spelling in out
