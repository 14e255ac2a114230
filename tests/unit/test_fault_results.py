"""The fault matrix's results table, read from the JUnit XML pytest writes."""

from __future__ import annotations

import pytest
from faults.results import (
    LAST_RUN_BEGIN,
    LAST_RUN_END,
    case_results,
    last_run_section,
    main,
    markdown_table,
    with_last_run,
)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="0" tests="3"
 time="1434.9" timestamp="2026-12-04T18:39:58.402006+00:00" hostname="ci-7">
<testcase classname="tests.faults.test_fault_matrix" name="test_sigint_at_each_step[gate]"
 time="61.2"><properties><property name="stop_to_way_back_seconds" value="0.61"/>
<property name="stop_to_exit_seconds" value="17.43"/></properties></testcase>
<testcase classname="tests.faults.test_fault_matrix" name="test_concurrent_deploys"
 time="40.6"><failure message="assert 3 == 0">...</failure></testcase>
<testcase classname="tests.faults.test_fault_matrix" name="test_garbage_metrics"
 time="0.4"><error message="fixture lab failed">...</error></testcase>
</testsuite></testsuites>
"""


def test_each_case_gets_its_outcome_and_time() -> None:
    results = case_results(JUNIT)
    assert [(r.case, r.outcome, r.seconds) for r in results] == [
        ("test_sigint_at_each_step[gate]", "pass", 61.2),
        ("test_concurrent_deploys", "failure", 40.6),
        ("test_garbage_metrics", "error", 0.4),
    ]
    assert (results[0].stop_to_way_back, results[0].stop_to_exit) == (0.61, 17.43)
    table = markdown_table(results)
    assert "| `test_sigint_at_each_step[gate]` | pass | 61 | 0.61 / 17.4 |" in table.splitlines()
    assert "| `test_concurrent_deploys` | failure | 41 |  |" in table.splitlines()
    assert table.endswith("1 of 3 cases pass.")


def test_exit_status_is_1_unless_every_case_passed(tmp_path, capsys) -> None:
    failing = tmp_path / "failing.xml"
    failing.write_text(JUNIT)
    assert main([str(failing)]) == 1
    passing = tmp_path / "passing.xml"
    passing.write_text(
        '<testsuites><testsuite><testcase name="a" time="1"/></testsuite></testsuites>'
    )
    assert main([str(passing)]) == 0
    empty = tmp_path / "empty.xml"
    empty.write_text("<testsuites><testsuite/></testsuites>")
    assert main([str(empty)]) == 1
    assert "0 of 0 cases pass." in capsys.readouterr().out


DOC = f"""# Reliability

### Last full run

{LAST_RUN_BEGIN}
| case | result | seconds |
|---|---|---|
| `typed by hand` | pass | 1 |
{LAST_RUN_END}

Run on two workers ...
"""


def test_the_docs_last_run_is_the_results_files_table_and_nothing_else(tmp_path) -> None:
    results = tmp_path / "faults.xml"
    results.write_text(JUNIT)
    doc = tmp_path / "reliability.md"
    doc.write_text(DOC)

    assert main(["--doc", str(doc), str(results)]) == 1  # a case failed: said, and written

    assert doc.read_text() == "\n".join(
        [
            "# Reliability",
            "",
            "### Last full run",
            "",
            LAST_RUN_BEGIN,
            f"Written from `{results}`: the run started 2026-12-04 18:39 UTC on ci-7, "
            "3 cases in 23 min 55 s.",
            "",
            "| case | result | seconds | stop latency (s): way back / exit |",
            "|---|---|---|---|",
            "| `test_sigint_at_each_step[gate]` | pass | 61 | 0.61 / 17.4 |",
            "| `test_concurrent_deploys` | failure | 41 |  |",
            "| `test_garbage_metrics` | error | 0 |  |",
            "",
            "1 of 3 cases pass.",
            LAST_RUN_END,
            "",
            "Run on two workers ...",
            "",
        ]
    )
    # written again from the same file, the document does not change
    assert with_last_run(doc.read_text(), last_run_section(JUNIT, str(results))) == (
        doc.read_text()
    )


def test_a_document_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError):
        with_last_run("# Reliability\n", "table")
