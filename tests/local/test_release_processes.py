"""release: the cases that run a real process (a shell, the CLI or a script); the
rest are unit tests in tests/unit/test_release.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

from releasefiles import CURRENT_DIR, NEW_DIR

from orchestrator.drafters.kinds import get_kind
from orchestrator.plan import DRAFTER_CONFIG, LAUNCH_SCRIPT
from orchestrator.release import changes

ROOT = Path(__file__).resolve().parent.parent.parent
VIEW_CONFIG = f"drafter/{DRAFTER_CONFIG}"
KEY_FIELDS = get_kind("dflash").key_fields


def gnu_diff(
    tmp_path: Path, old: bytes | None, new: bytes | None, old_label: str, new_label: str
) -> str:
    """GNU diff's own output for the same pair (None: /dev/null), the reference the diffs
    must match."""
    paths = []
    for name, data in (("old", old), ("new", new)):
        if data is not None:
            (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name) if data is not None else "/dev/null")
    done = subprocess.run(
        ["diff", "-u", "--label", old_label, "--label", new_label, *paths],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def test_changes_read_current_then_new_with_the_container_and_paths(
    rendered: dict[str, bytes], tmp_path: Path
) -> None:
    script = rendered[LAUNCH_SCRIPT]
    current = {DRAFTER_CONFIG: rendered[DRAFTER_CONFIG], LAUNCH_SCRIPT: script}
    new = {**current, LAUNCH_SCRIPT: script.replace(b"--port 8000", b"--port 8001")}

    diff = changes("ct200", CURRENT_DIR, current, NEW_DIR, new)

    old_label = f"ct200:{CURRENT_DIR}/{LAUNCH_SCRIPT} (current)"
    new_label = f"ct200:{NEW_DIR}/{LAUNCH_SCRIPT} (new)"
    assert diff.splitlines()[:2] == [f"--- {old_label}", f"+++ {new_label}"]
    assert [line for line in diff.splitlines()[2:] if line[:1] in "+-"] == [
        "-  --port 8000 \\",
        "+  --port 8001 \\",
    ]
    assert diff == gnu_diff(tmp_path, script, new[LAUNCH_SCRIPT], old_label, new_label)


def test_with_no_current_release_every_file_is_new_against_dev_null(
    rendered: dict[str, bytes], tmp_path: Path
) -> None:
    new = {DRAFTER_CONFIG: rendered[DRAFTER_CONFIG], LAUNCH_SCRIPT: rendered[LAUNCH_SCRIPT]}

    diff = changes("ct200", None, {}, NEW_DIR, new)

    expected = "".join(
        gnu_diff(tmp_path, None, data, "/dev/null", f"ct200:{NEW_DIR}/{name} (new)")
        for name, data in new.items()
    )
    assert diff == expected
    assert diff.count("--- /dev/null\n") == 2


def test_a_file_the_current_release_lacks_is_new_and_a_missing_newline_is_marked(
    tmp_path: Path,
) -> None:
    current = {LAUNCH_SCRIPT: b"#!/bin/sh\nexec vllm serve"}
    new = {LAUNCH_SCRIPT: b"#!/bin/sh\nexec vllm serve\n", DRAFTER_CONFIG: b"{}"}

    diff = changes("ct201", CURRENT_DIR, current, NEW_DIR, new)

    script_labels = (
        f"ct201:{CURRENT_DIR}/{LAUNCH_SCRIPT} (current)",
        f"ct201:{NEW_DIR}/{LAUNCH_SCRIPT} (new)",
    )
    expected = gnu_diff(tmp_path, current[LAUNCH_SCRIPT], new[LAUNCH_SCRIPT], *script_labels)
    expected += gnu_diff(
        tmp_path, None, b"{}", "/dev/null", f"ct201:{NEW_DIR}/{DRAFTER_CONFIG} (new)"
    )
    assert diff == expected
    assert "\\ No newline at end of file" in diff
    assert changes("ct201", CURRENT_DIR, new, NEW_DIR, new) == ""


def test_a_file_the_new_release_lacks_is_removed_against_dev_null(tmp_path: Path) -> None:
    current = {DRAFTER_CONFIG: b'{"a": 1}\n', LAUNCH_SCRIPT: b"#!/bin/sh\n"}
    new = {LAUNCH_SCRIPT: b"#!/bin/sh\n"}

    diff = changes("ct201", CURRENT_DIR, current, NEW_DIR, new)

    old_label = f"ct201:{CURRENT_DIR}/{DRAFTER_CONFIG} (current)"
    assert diff == gnu_diff(tmp_path, current[DRAFTER_CONFIG], None, old_label, "/dev/null")
    assert diff.splitlines()[:3] == [f"--- {old_label}", "+++ /dev/null", "@@ -1 +0,0 @@"]
