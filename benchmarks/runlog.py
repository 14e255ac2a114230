"""What recording a run costs: one remote command's record in the run log.

Run: `.venv/bin/python benchmarks/runlog.py [--records 2000]`.
Writes records shaped like a deploy's commands (a 1.5 KiB script, 300 bytes of
stdout; and a 64 KiB stdout cut to the 4 KiB bound) into a run log in a temporary
directory, from 1 thread and from 8 (containers in parallel), and prints the
microseconds per record and the bytes written per record. Peer: the same text
written to a file held open, i.e. what appending each record on its own (open,
write, close, so a killed run loses nothing) adds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from orchestrator.container.status import status_report
from orchestrator.layout import Layout
from orchestrator.runlog import RunLog

RUN = "20261202T200633Z-0dff02"
SCRIPT = status_report(Layout("/var/lib/orch/qwen-dflash"))
SMALL = (0, b"current releases/6bcc34a9fda6\nserver running 4242\n" * 6, b"")
LARGE = (0, b"x" * 65536, b"")


def per_record(log: RunLog, outcome: tuple[int, bytes, bytes], records: int, threads: int) -> float:
    """Microseconds per record, `records` in all from `threads` threads."""

    def work() -> None:
        for _ in range(records // threads):
            log.command("ct200", SCRIPT, None, 0.05, outcome)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return (time.perf_counter() - started) / records * 1e6


def held_open(text: str, records: int, path: Path) -> float:
    with path.open("a") as file:
        started = time.perf_counter()
        for _ in range(records):
            file.write(text)
            file.flush()
    return (time.perf_counter() - started) / records * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args()
    print(f"run log records, median of 3 runs of {args.records}")
    print(
        f"  {'record':<26}{'threads':>8}{'us/record':>11}{'bytes/record':>14}{'open file us':>14}"
    )
    with tempfile.TemporaryDirectory() as temporary:
        for label, outcome in (("300 B stdout", SMALL), ("64 KiB stdout (bounded)", LARGE)):
            for threads in (1, 8):
                times, sizes = [], []
                for attempt in range(3):
                    path = Path(temporary) / f"{label[:3]}-{threads}-{attempt}.log"
                    log = RunLog(RUN, path)
                    times.append(per_record(log, outcome, args.records, threads))
                    sizes.append(path.stat().st_size / args.records)
                one = path.read_text()[: int(sizes[-1])]
                peer = held_open(one, args.records, Path(temporary) / "peer.log")
                print(
                    f"  {label:<26}{threads:>8}{statistics.median(times):>11.1f}"
                    f"{statistics.median(sizes):>14.0f}{peer:>14.1f}"
                )


if __name__ == "__main__":
    main()
