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


STOP_TO_WAY_BACK = "stop_to_way_back_seconds"
STOP_TO_EXIT = "stop_to_exit_seconds"
"""The properties a signal case records (pytest's `record_property`): seconds from the
signal to the first step of the way back, and to the exit."""


@dataclass(frozen=True)
class CaseResult:
    case: str
    outcome: str
    seconds: float
    stop_to_way_back: float | None = None
    stop_to_exit: float | None = None

    @property
    def stop_latency(self) -> str:
        """`way back / exit` in seconds, blank for a case that sends no stop."""
        if self.stop_to_way_back is None or self.stop_to_exit is None:
            return ""
        return f"{self.stop_to_way_back:.2f} / {self.stop_to_exit:.1f}"


def case_results(junit_xml: str) -> list[CaseResult]:
    """One result per test case, in the file's order: pass, failure, error or skipped."""
    root = ElementTree.fromstring(junit_xml)
    results = []
    for testcase in root.iter("testcase"):
        outcome = next((o for o in OUTCOMES if testcase.find(o) is not None), "pass")
        recorded = {p.get("name"): float(p.get("value", "nan")) for p in testcase.iter("property")}
        results.append(
            CaseResult(
                testcase.get("name", "?"),
                outcome,
                float(testcase.get("time", 0)),
                recorded.get(STOP_TO_WAY_BACK),
                recorded.get(STOP_TO_EXIT),
            )
        )
    return results


def markdown_table(results: list[CaseResult]) -> str:
    passed = sum(r.outcome == "pass" for r in results)
    lines = [
        "| case | result | seconds | stop latency (s): way back / exit |",
        "|---|---|---|---|",
        *(f"| `{r.case}` | {r.outcome} | {r.seconds:.0f} | {r.stop_latency} |" for r in results),
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
