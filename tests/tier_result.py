"""Whether a tier of the suite ran anything, read from pytest's JUnit XML: a tier whose
every test skipped (the real vLLM's venv missing, say) tested nothing and must not pass.

`scripts/test` runs each tier with `--junitxml .cache/tiers/TIER.xml`, then:

    .venv/bin/python tests/tier_result.py .cache/tiers/TIER.xml TIER

It prints the tier's counts and exits 1 when no test in it passed.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

OUTCOMES = ("failure", "error", "skipped")


def outcomes(junit_xml: str) -> Counter[str]:
    """How many test cases passed, failed, erred and skipped."""
    root = ElementTree.fromstring(junit_xml)
    return Counter(
        next((o for o in OUTCOMES if case.find(o) is not None), "passed")
        for case in root.iter("testcase")
    )


def verdict(tier: str, counts: Counter[str]) -> tuple[str, int]:
    """The line to print and the exit code: 1 when nothing in the tier passed."""
    line = (
        f"{tier} tier: {counts['passed']} passed, {counts['failure']} failed, "
        f"{counts['error']} errors, {counts['skipped']} skipped"
    )
    if counts["passed"] == 0:
        return f"{line}: nothing in it passed, so it tested nothing: a failure here", 1
    return line, 0


def main(argv: list[str]) -> int:
    path, tier = Path(argv[0]), argv[1]
    if not path.is_file():
        print(f"{tier} tier: no results at {path}: it did not run", file=sys.stderr)
        return 1
    line, code = verdict(tier, outcomes(path.read_text()))
    print(line, file=sys.stderr if code else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
