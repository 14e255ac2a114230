"""A tier of the suite passes only when something in it passed (tests/tier_result.py)."""

from __future__ import annotations

from pathlib import Path

from tier_result import main, outcomes, verdict


def junit(*cases: str) -> str:
    """A JUnit XML report with one test case per outcome given ("passed", "skipped", ...)."""
    body = {
        "passed": "",
        "skipped": '<skipped message="no real vLLM"/>',
        "failure": '<failure message="assert"/>',
        "error": '<error message="setup"/>',
    }
    rows = "".join(
        f'<testcase classname="t" name="case{i}" time="0.1">{body[c]}</testcase>'
        for i, c in enumerate(cases)
    )
    return f'<testsuites><testsuite name="pytest">{rows}</testsuite></testsuites>'


def test_a_tier_whose_every_test_skipped_tested_nothing_and_fails() -> None:
    line, code = verdict("realvllm", outcomes(junit("skipped", "skipped", "skipped")))

    assert code == 1
    assert line.startswith("realvllm tier: 0 passed, 0 failed, 0 errors, 3 skipped")
    assert "tested nothing" in line


def test_a_tier_with_a_passing_test_passes_its_skips_named() -> None:
    line, code = verdict("lab", outcomes(junit("passed", "skipped", "passed")))

    assert (line, code) == ("lab tier: 2 passed, 0 failed, 0 errors, 1 skipped", 0)


def test_failures_and_errors_are_counted_apart() -> None:
    counts = outcomes(junit("passed", "failure", "error", "error"))

    assert (counts["passed"], counts["failure"], counts["error"]) == (1, 1, 2)


def test_a_tier_without_results_did_not_run(tmp_path: Path) -> None:
    assert main([str(tmp_path / "missing.xml"), "alone"]) == 1
