"""Release scripts under /bin/sh (drafter view, listing, removal) and their parsers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from shelltools import (
    run,
)

from orchestrator.container.shell import (
    append_line,
)
from orchestrator.container.store import (
    list_releases,
    make_drafter_view,
    parse_release_list,
    release_id_of,
    remove_releases,
)
from orchestrator.drafters.modelfiles import (
    write_safetensors_stub,
)
from orchestrator.errors import NeedsAttention


def test_release_removal_and_log_scripts() -> None:
    assert remove_releases("/d/releases", ["abc", "x y; rm -rf /", "*"]) == [
        "/bin/sh",
        "-c",
        "rm -rf -- /d/releases/abc '/d/releases/x y; rm -rf /' '/d/releases/*'",
    ]
    assert append_line("/d/audit.log", "it's $HOME") == [
        "/bin/sh",
        "-c",
        """printf '%s\\n' 'it'"'"'s $HOME' >> /d/audit.log""",
    ]


def test_drafter_view_links_every_weight_and_its_own_config(tmp_path: Path) -> None:
    weights = tmp_path / "models" / "Qwen3.6-27B-DFlash"
    weights.mkdir(parents=True)
    write_safetensors_stub(weights / "model.safetensors", {"fc.weight": ("BF16", [64, 64])})
    write_safetensors_stub(weights / "extra part.safetensors", {"x": ("F32", [4])})
    (weights / "config.json").write_text('{"guessed": true}')
    (weights / "README.md").write_text("readme")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in weights.iterdir()}
    release = tmp_path / "releases" / "abc"
    release.mkdir(parents=True)
    (release / "config.json").write_text('{"rendered": true}')
    view = release / "drafter"

    for _ in range(2):  # a second run changes nothing
        done = run(make_drafter_view(str(weights), str(view)))
        assert done.returncode == 0, done.stderr

        assert sorted(p.name for p in view.iterdir()) == sorted(before)
        for name in before:
            expected = "../config.json" if name == "config.json" else str(weights / name)
            assert os.readlink(view / name) == expected
        assert json.loads((view / "config.json").read_text()) == {"rendered": True}
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in weights.iterdir()} == before


def test_list_releases_oldest_first_and_remove_by_exact_name(tmp_path: Path) -> None:
    releases = tmp_path / "releases"
    for release, mtime in (("b2", 3_000), ("a1", 2_000), ("c3", 1_000), ("x *", 4_000)):
        (releases / release).mkdir(parents=True)
        os.utime(releases / release, (mtime, mtime))
    (releases / "stray-file").write_text("")

    listed = run(list_releases(str(releases)))

    assert listed.stdout.decode().splitlines() == ["1000 c3", "2000 a1", "3000 b2", "4000 x *"]
    assert run(remove_releases(str(releases), ["*", "c3", "a1"])).returncode == 0
    assert sorted(p.name for p in releases.iterdir()) == ["b2", "stray-file", "x *"]
    assert run(list_releases(str(tmp_path / "nope"))).stdout == b""


def test_release_id_of_a_link_target() -> None:
    assert release_id_of("releases/ab12cd34ef56\n") == "ab12cd34ef56"
    assert release_id_of("") is None
    assert release_id_of("\n") is None


def test_release_list_is_ids_oldest_first() -> None:
    assert parse_release_list("1700000000 aaa\n1700000100 bbb\n\n") == ["aaa", "bbb"]
    assert parse_release_list("") == []
    with pytest.raises(NeedsAttention, match="release list"):
        parse_release_list("1700000000\n")
