"""The fault matrix's results as a Markdown table, read from pytest's JUnit XML.

`.ci/run` runs the matrix with `--junitxml .ci/faults.xml` and prints this table into its
log. docs/reliability.md's "Last full run" is this table too, written into it (between
its two markers) by `scripts/reliability-table` from the results file, never by hand:

    .venv/bin/python tests/faults/results.py .ci/faults.xml
    .venv/bin/python tests/faults/results.py --doc docs/reliability.md .ci/faults.xml
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


LAST_RUN_BEGIN = "<!-- last full run: written by scripts/reliability-table, not by hand -->"
LAST_RUN_END = "<!-- end of the last full run -->"


@dataclass(frozen=True)
class RunFacts:
    """When and where the results file's run happened, as pytest recorded it."""

    started: str
    host: str
    seconds: float


def run_facts(junit_xml: str) -> RunFacts:
    root = ElementTree.fromstring(junit_xml)
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return RunFacts("?", "?", 0.0)
    started = suite.get("timestamp", "?")[:16].replace("T", " ")
    return RunFacts(started, suite.get("hostname", "?"), float(suite.get("time", 0)))


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


def last_run_section(junit_xml: str, source: str) -> str:
    """The "Last full run" text: when, where and how long, then the table."""
    facts, results = run_facts(junit_xml), case_results(junit_xml)
    minutes, seconds = divmod(round(facts.seconds), 60)
    return "\n".join(
        [
            f"Written from `{source}`: the run started {facts.started} UTC on "
            f"{facts.host}, {len(results)} cases in {minutes} min {seconds} s.",
            "",
            markdown_table(results),
        ]
    )


def with_last_run(document: str, section: str) -> str:
    """`document` with what lies between its last-run markers replaced by `section`."""
    begin, end = document.index(LAST_RUN_BEGIN), document.index(LAST_RUN_END)
    if end < begin:
        raise ValueError("the last-run markers are out of order")
    head, tail = document[: begin + len(LAST_RUN_BEGIN)], document[end:]
    return f"{head}\n{section}\n{tail}"


def main(argv: list[str]) -> int:
    """Prints the table (with `--doc DOC`: writes it into DOC's last-run section);
    exit 1 when a case did not pass or none ran."""
    doc = None
    if argv[:1] == ["--doc"]:
        doc, argv = Path(argv[1]), argv[2:]
    (path,) = argv
    junit_xml = Path(path).read_text()
    results = case_results(junit_xml)
    if doc:
        doc.write_text(with_last_run(doc.read_text(), last_run_section(junit_xml, path)))
    else:
        print(markdown_table(results))
    return 0 if results and all(r.outcome == "pass" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
