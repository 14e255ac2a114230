"""Start-up time of `orch --help` beside a bare `python -c pass`, and what its imports cost.

Run: `.venv/bin/python benchmarks/startup.py [--runs N]`. Times each command
N times (after one warm-up run) as a child process started in `/`, and prints
the median wall time and its ratio to `python -c pass` run by the same
interpreter; then runs `python -X importtime -c "import orchestrator.cli"`
N times and prints the imports with the largest median cumulative time.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

NEUTRAL_CWD = "/"  # not the checkout: the package is found as installed, as for a user
ORCH = Path(sys.executable).parent / "orch"
TOP_IMPORTS = 12


def wall_seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=NEUTRAL_CWD)
    return time.perf_counter() - started


def median_wall(argv: list[str], runs: int) -> float:
    wall_seconds(argv)
    return statistics.median(wall_seconds(argv) for _ in range(runs))


def import_times() -> dict[str, tuple[int, int, str]]:
    """Module -> (self µs, cumulative µs, importer) for what `import orchestrator.cli` loads.

    `-X importtime` lists a module after everything it imported, indented one
    level deeper than its importer; the interpreter's own start-up is left out.
    """
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import orchestrator.cli"],
        check=True,
        capture_output=True,
        text=True,
        cwd=NEUTRAL_CWD,
    )
    lines = [
        line.removeprefix("import time:").split("|")
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "[us]" not in line
    ]
    entries = [
        (own, cumulative, name.strip(), len(name) - len(name.lstrip()))
        for own, cumulative, name in lines
    ]
    root = next(i for i, entry in enumerate(entries) if entry[2] == "orchestrator.cli")
    start = root
    while start > 0 and entries[start - 1][3] > entries[root][3]:
        start -= 1
    times = {}
    for i in range(start, root + 1):
        own, cumulative, name, indent = entries[i]
        importer = next((e[2] for e in entries[i + 1 : root + 1] if e[3] < indent), "")
        times[name] = (int(own), int(cumulative), importer)
    return times


def median_import_times(runs: int) -> list[tuple[str, str, float, float]]:
    """(module, importer, median self ms, median cumulative ms), largest cumulative first."""
    samples: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for _ in range(runs):
        for name, sample in import_times().items():
            samples[name].append(sample)
    rows = [
        (
            name,
            values[0][2],
            statistics.median(s[0] for s in values) / 1000,
            statistics.median(s[1] for s in values) / 1000,
        )
        for name, values in samples.items()
    ]
    return sorted(rows, key=lambda row: row[3], reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    commands = {
        "python -c pass (baseline)": [sys.executable, "-c", "pass"],
        "python -m orchestrator --help": [sys.executable, "-m", "orchestrator", "--help"],
        ".venv/bin/orch --help": [str(ORCH), "--help"],
    }
    walls = {label: median_wall(argv, runs) for label, argv in commands.items()}
    baseline = walls["python -c pass (baseline)"]
    print(f"start-up, median of {runs} runs")
    print(f"  {'command':<32} {'wall ms':>8} {'x baseline':>11}")
    for label, wall in walls.items():
        print(f"  {label:<32} {wall * 1000:8.1f} {wall / baseline:11.2f}")
    print(f"\nimport orchestrator.cli, -X importtime, median of {runs} runs")
    print(f"  {'module':<28} {'imported by':<20} {'self ms':>8} {'cumul ms':>9}")
    for name, importer, own, cumulative in median_import_times(runs)[:TOP_IMPORTS]:
        print(f"  {name:<28} {importer:<20} {own:8.1f} {cumulative:9.1f}")


if __name__ == "__main__":
    main()
