"""The maintainer's tool that reads the capability table's facts out of a vLLM release,
and the table and the lab's data read back against the wheels at hand (tests/realvllm.py:
`ORCH_VLLM_WHEELS`, and the lab's venvs for 0.32.0 and 0.34.0). A release whose wheel is
not here skips its own tests only, saying how to bring it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from realvllm import VENV, absent, needs_032, release_trees

from orchestrator.lab.releases import _facts as lab_facts
from orchestrator.lab.releases import known_releases, release
from orchestrator.serving.capabilities import FACT_FIELDS, capabilities_for, load_table
from orchestrator.serving.wheelfacts import Release, facts, rows

SITE = next(iter(sorted(VENV.glob("lib/python3*/site-packages"))), VENV / "missing")
TREES = release_trees()
TABLE = load_table()
RELEASES = [release for row in TABLE.rows for release in row.releases]


def recorded(version: str) -> dict[str, object]:
    """The facts of the row covering `version`, as the tool gives them (lists, not tuples)."""
    row = capabilities_for(version).row
    return {k: list(v) if isinstance(v := getattr(row, k), tuple) else v for k in FACT_FIELDS}


def text_of(version: str, path: str) -> list[str]:
    """The lines of `path` in the release's wheel or installed tree."""
    tree = TREES[version]
    if tree.is_file():
        with zipfile.ZipFile(tree) as wheel:
            return wheel.read(path).decode("utf-8").splitlines()
    return (tree / path).read_text(encoding="utf-8").splitlines()


@needs_032
def test_the_installed_release_reads_as_its_row_of_the_table() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.serving.wheelfacts", "--rows", str(SITE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    [read] = json.loads(done.stdout)
    [version] = read["releases"]
    row = capabilities_for(version).row
    assert version in row.releases
    assert {k: read[k] for k in FACT_FIELDS} == recorded(version)


@pytest.mark.parametrize("version", RELEASES)
def test_each_release_at_hand_reads_as_its_row(version: str) -> None:
    """The tool's extraction, run on the wheel, gives the row's facts; on the row's first
    release (the one it cites), its sources and quoted lines too."""
    if version not in TREES:
        pytest.skip(absent(version))
    row = capabilities_for(version).row
    read = {fact.name: fact for fact in facts(Release(TREES[version]))}
    assert {k: (read[k].value if k in read else None) for k in FACT_FIELDS} == recorded(version)
    if version == row.releases[0]:
        assert {k: f"{f.source} in {version}" for k, f in read.items()} == row.sources
        assert {k: f.quote for k, f in read.items() if f.quote is not None} == row.quotes


CITED = re.compile(r"^([\w/.]+):(\d+) in (\S+)$")


@pytest.mark.parametrize(
    ("version", "fact"),
    [(row.releases[0], fact) for row in TABLE.rows for fact in row.quotes],
)
def test_every_cited_line_of_the_table_reads_back_from_its_wheel(version: str, fact: str) -> None:
    """Each line-cited fact's line, read from the wheel the source names, is the line the
    table quotes."""
    row = capabilities_for(version).row
    path, line, cited_in = CITED.match(row.sources[fact]).groups()  # type: ignore[union-attr]
    assert cited_in == version
    if version not in TREES:
        pytest.skip(absent(version))
    assert text_of(version, path)[int(line) - 1].strip() == row.quotes[fact]


@pytest.mark.parametrize(
    ("version", "fact"),
    [
        (row.releases[0], fact)
        for row in TABLE.rows
        for fact in sorted(set(row.sources) - set(row.quotes))
    ],
)
def test_a_fact_cited_by_file_alone_names_the_files_state(version: str, fact: str) -> None:
    """A fact about a file's absence or content without a line: an absent file is absent
    from the wheel, a present one is there."""
    if version not in TREES:
        pytest.skip(absent(version))
    source = capabilities_for(version).row.sources[fact]
    path = source.split(" ")[0]
    present = True
    try:
        text_of(version, path)
    except (KeyError, FileNotFoundError):
        present = False
    assert present is ("(absent" not in source), source


LAB_CITED = re.compile(r"^(\d+\.\d+\.\d+) (vllm/[\w/.]+\.py):(\d+)")


def lab_quotes() -> list[tuple[str, str, str, str]]:
    """(fact, version, path:line, quote) of each lab step that quotes its first citation."""
    found = []
    for name, steps in lab_facts().steps.items():
        for _, step in steps:
            if step.quote is not None:
                cited = LAB_CITED.match(step.source)
                assert cited, (name, step.source)
                found.append((name, cited[1], f"{cited[2]}:{cited[3]}", step.quote))
    return found


@pytest.mark.parametrize(("fact", "version", "where", "quote"), lab_quotes())
def test_the_labs_quoted_lines_read_back_from_their_wheels(
    fact: str, version: str, where: str, quote: str
) -> None:
    """The lab holds its facts apart from orch's table; where a step quotes the line it
    cites, that line is read back from the wheel."""
    if version not in TREES:
        pytest.skip(absent(version))
    path, line = where.split(":")
    assert text_of(version, path)[int(line) - 1].strip() == quote


@pytest.mark.parametrize("version", known_releases())
def test_the_labs_methods_and_mixed_drafter_error_are_the_wheels(version: str) -> None:
    """The methods the lab's stand-in accepts, and the words it dies with for a mixed
    drafter, are the ones the release's own code has, as the tool reads them from its
    wheel."""
    if version not in TREES:
        pytest.skip(absent(version))
    read = {fact.name: fact.value for fact in facts(Release(TREES[version]))}
    assert release(version).methods == read["methods"]
    assert release(version).fact("mixed_dflash_drafter").error == read.get("error")


def test_a_release_tree_is_read_as_text_and_grouped_into_rows(tmp_path: Path) -> None:
    """Two made-up releases that differ in one fact give two rows; equal ones, one."""
    for version, methods in (("9.0.0", '"ngram", "dflash"'), ("9.1.0", '"ngram"')):
        site = tmp_path / version
        (site / "vllm/config").mkdir(parents=True)
        (site / f"vllm-{version}.dist-info").mkdir()
        (site / f"vllm-{version}.dist-info/METADATA").write_text(f"Version: {version}\n")
        (site / "vllm/config/speculative.py").write_text(
            f"from typing import Literal\nA = Literal[{methods}]\nSpeculativeMethod = Literal[A]\n"
        )
    releases = [Release(tmp_path / v) for v in ("9.0.0", "9.1.0", "9.1.0")]
    assert releases[0].version == "9.0.0"
    [methods, *_] = facts(releases[0])
    assert (methods.value, methods.source) == (["ngram", "dflash"], "vllm/config/speculative.py:3")
    assert methods.quote == "SpeculativeMethod = Literal[A]"
    grouped = rows({r.version + str(i): facts(r) for i, r in enumerate(releases)})
    assert [g["releases"] for g in grouped] == [["9.0.00"], ["9.1.01", "9.1.02"]]
