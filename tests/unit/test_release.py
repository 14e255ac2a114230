"""Cat-verify: what was read back from a release against what was rendered for it."""

from __future__ import annotations

import json
import re

import pytest
from releasefiles import VIEW_CONFIG

from orchestrator.drafters.kinds import get_kind
from orchestrator.plan import DRAFTER_CONFIG, LAUNCH_SCRIPT
from orchestrator.release import Mismatch, sha256
from orchestrator.release import compare as compare_files

KEY_FIELDS = get_kind("dflash").key_fields


def compare(expected: dict[str, bytes], actual: dict[str, bytes]) -> list[Mismatch]:
    return compare_files(expected, actual, KEY_FIELDS)


def with_config(rendered: dict[str, bytes], name: str, **changes: object) -> dict[str, bytes]:
    config = json.loads(rendered[name])
    config.update(changes)
    return {**rendered, name: (json.dumps(config, indent=2) + "\n").encode()}


def test_an_identical_read_back_has_no_mismatch(rendered: dict[str, bytes]) -> None:
    read_back = {name: bytes(data) for name, data in rendered.items()}
    assert compare(rendered, read_back) == []
    assert compare(rendered, {**read_back, "extra.txt": b"not ours to judge"}) == []


def test_one_changed_byte_is_a_sha_mismatch_with_a_unified_diff(
    rendered: dict[str, bytes],
) -> None:
    script = rendered[LAUNCH_SCRIPT]
    assert script.count(b"--port 8000") == 1
    changed = script.replace(b"--port 8000", b"--port 8001")

    [mismatch] = compare(rendered, {**rendered, LAUNCH_SCRIPT: changed})

    assert mismatch.name == LAUNCH_SCRIPT
    assert mismatch.reason == f"SHA-256 {sha256(changed)[:12]} != rendered {sha256(script)[:12]}"
    lines = mismatch.diff.splitlines()
    assert lines[:2] == [f"--- {LAUNCH_SCRIPT} (rendered)", f"+++ {LAUNCH_SCRIPT} (on target)"]
    assert [line for line in lines[2:] if line[:1] in "+-"] == [
        "-  --port 8000 \\",
        "+  --port 8001 \\",
    ]
    assert str(mismatch) == f"{LAUNCH_SCRIPT}: {mismatch.reason}\n{mismatch.diff}"


@pytest.mark.parametrize("name", [DRAFTER_CONFIG, VIEW_CONFIG])
@pytest.mark.parametrize("key", KEY_FIELDS)
def test_a_changed_key_field_is_named(rendered: dict[str, bytes], name: str, key: str) -> None:
    want = json.loads(rendered[name]).get(key)

    mismatches = compare(rendered, with_config(rendered, name, **{key: "changed"}))

    assert [m.name for m in mismatches] == [name, name]
    assert mismatches[0].reason.startswith("SHA-256 ")
    assert mismatches[1] == Mismatch(name, f"{key}: 'changed' != rendered {want!r}")


def test_other_fields_are_caught_by_the_sha_alone(rendered: dict[str, bytes]) -> None:
    [mismatch] = compare(rendered, with_config(rendered, DRAFTER_CONFIG, rope_theta=1))
    assert mismatch.name == DRAFTER_CONFIG
    assert re.fullmatch(r"SHA-256 [0-9a-f]{12} != rendered [0-9a-f]{12}", mismatch.reason)
    assert '+  "rope_theta": 1,' in mismatch.diff.splitlines()


def test_the_same_json_formatted_differently_is_still_a_mismatch(
    rendered: dict[str, bytes],
) -> None:
    compact = json.dumps(json.loads(rendered[DRAFTER_CONFIG])).encode()
    [mismatch] = compare(rendered, {**rendered, DRAFTER_CONFIG: compact})
    assert mismatch.name == DRAFTER_CONFIG and mismatch.reason.startswith("SHA-256 ")


def test_truncated_json_is_not_valid_json(rendered: dict[str, bytes]) -> None:
    cut = rendered[VIEW_CONFIG][: len(rendered[VIEW_CONFIG]) // 2]

    sha, invalid = compare(rendered, {**rendered, VIEW_CONFIG: cut})

    assert (sha.name, invalid.name) == (VIEW_CONFIG, VIEW_CONFIG)
    assert sha.diff.startswith(f"--- {VIEW_CONFIG} (rendered)")
    assert invalid.reason.startswith("not valid JSON as read back: ")


def test_json_that_is_not_an_object_is_a_mismatch(rendered: dict[str, bytes]) -> None:
    sha, not_object = compare(rendered, {**rendered, VIEW_CONFIG: b"[1, 2]"})

    assert sha.name == not_object.name == VIEW_CONFIG
    assert not_object.reason == "not a JSON object as read back"


def test_a_file_missing_on_the_target(rendered: dict[str, bytes]) -> None:
    read_back = {name: data for name, data in rendered.items() if name != LAUNCH_SCRIPT}
    assert compare(rendered, read_back) == [Mismatch(LAUNCH_SCRIPT, "missing on the target")]
