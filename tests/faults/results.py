"""The fault matrix's results as a Markdown table, read from pytest's JUnit XML.

`.ci/run` runs the matrix with `--junitxml .ci/faults.xml` and prints this table into its
log; docs/reliability.md keeps the table of the last full run beside what each case does.

    .venv/bin/python tests/faults/results.py .ci/faults.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

OUTCOMES = ("failure", "error", "skipped")


@dataclass(frozen=True)
class CaseResult:
    case: str
    outcome: str
    seconds: float


def case_results(junit_xml: str) -> list[CaseResult]:
    """One result per test case, in the file's order: pass, failure, error or skipped."""
    root = ElementTree.fromstring(junit_xml)
    results = []
    for testcase in root.iter("testcase"):
        outcome = next((o for o in OUTCOMES if testcase.find(o) is not None), "pass")
        results.append(
            CaseResult(testcase.get("name", "?"), outcome, float(testcase.get("time", 0)))
        )
    return results


def markdown_table(results: list[CaseResult]) -> str:
    passed = sum(r.outcome == "pass" for r in results)
    lines = [
        "| case | result | seconds |",
        "|---|---|---|",
        *(f"| `{r.case}` | {r.outcome} | {r.seconds:.0f} |" for r in results),
        "",
        f"{passed} of {len(results)} cases pass.",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Prints the table; exit 1 when a case did not pass or none ran."""
    (path,) = argv
    results = case_results(Path(path).read_text())
    print(markdown_table(results))
    return 0 if results and all(r.outcome == "pass" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
