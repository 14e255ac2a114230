from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.errors import InputError
from orchestrator.yamlsource import MAX_DEPTH, dotted, load_yaml_file, parse_yaml


def test_positions_of_keys_and_items_are_one_based() -> None:
    document = parse_yaml("a:\n  b: [1, 2]\n  c:\n    - x\n    - y\n", "f.yaml")
    assert document.data == {"a": {"b": [1, 2], "c": ["x", "y"]}}
    assert document.where(("a", "b")) == "f.yaml:2:3"
    assert document.where(("a", "b", 1)) == "f.yaml:2:10"
    assert document.where(("a", "c", 1)) == "f.yaml:5:7"


def test_unknown_location_falls_back_to_its_deepest_known_parent() -> None:
    document = parse_yaml("a:\n  b: 1\n", "f.yaml")
    assert document.where(("a", "b", "deeper", 3)) == "f.yaml:2:3"


def test_duplicate_key_is_an_error_with_its_position() -> None:
    with pytest.raises(InputError, match=r"^f.yaml:3:3: a.k: duplicate key$"):
        parse_yaml("a:\n  k: 1\n  k: 2\n", "f.yaml")


def test_unsafe_tags_are_refused() -> None:
    with pytest.raises(
        InputError, match=r"f.yaml:1:4: tag .*python/object/apply:os.system.* is not allowed"
    ):
        parse_yaml("a: !!python/object/apply:os.system ['true']\n", "f.yaml")


def test_syntax_error_names_line_and_column() -> None:
    with pytest.raises(InputError, match=r"^f.yaml:2:1: invalid YAML"):
        parse_yaml("a: [1\n", "f.yaml")


def test_anchors_and_merge_keys_work() -> None:
    document = parse_yaml("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n", "f.yaml")
    assert document.data["c"] == {"x": 1, "y": 3}


def test_dotted_paths() -> None:
    assert dotted(("containers", "ct1", "gpus", 0, "name")) == "containers.ct1.gpus[0].name"
    assert dotted(()) == ""


def laughs(levels: int, width: int = 9) -> str:
    """The billion laughs: each level an alias list of the level before."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels + 1):
        items = ", ".join([f"*l{level - 1}"] * width)
        lines.append(f"l{level}: &l{level} [{items}]")
    return "\n".join(lines) + "\n"


def test_aliases_that_expand_beyond_the_bound_are_refused() -> None:
    with pytest.raises(InputError, match=r"^f.yaml:\d+:\d+: aliases expand to more than 100000"):
        parse_yaml(laughs(9), "f.yaml")


def test_aliases_within_the_bound_still_work() -> None:
    assert len(parse_yaml(laughs(3), "f.yaml").data["l3"]) == 9


@pytest.mark.parametrize(
    "text", ["a: &a [1, *a]\n", "a: &a {b: *a}\n", "a: &a\n  <<: *a\n", "a: &a [[[*a]]]\n"]
)
def test_self_referencing_aliases_are_refused(text: str) -> None:
    with pytest.raises(InputError, match=r"^f.yaml:1:\d+: an alias refers to itself$"):
        parse_yaml(text, "f.yaml")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_nesting_beyond_the_bound_is_refused_with_its_line(depth: int) -> None:
    text = "ok: 1\nx: " + "[" * depth + "]" * depth + "\n"
    with pytest.raises(InputError, match=rf"^f.yaml:2: nested deeper than {MAX_DEPTH} levels$"):
        parse_yaml(text, "f.yaml")


def test_nesting_at_the_bound_is_fine() -> None:
    depth = MAX_DEPTH - 1  # the top-level mapping is one level
    value = parse_yaml("x: " + "[" * depth + "]" * depth, "f.yaml").data["x"]
    for _ in range(depth - 1):
        (value,) = value
    assert value == []


def test_block_nesting_beyond_the_bound_is_refused() -> None:
    text = "".join(f"{'  ' * level}k{level}:\n" for level in range(MAX_DEPTH + 2)) + "\n"
    with pytest.raises(InputError, match=r"^f.yaml:\d+: nested deeper than"):
        parse_yaml(text, "f.yaml")


def test_devices_fifos_and_directories_are_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    for path, kind in (
        (Path("/dev/zero"), "a character device"),
        (fifo, "a FIFO"),
        (tmp_path, "a directory"),
    ):
        with pytest.raises(InputError, match=rf"^{path}:1: not a regular file \({kind}\)$"):
            load_yaml_file(path)


def test_a_link_to_a_device_is_not_read(tmp_path: Path) -> None:
    link = tmp_path / "inventory.yaml"
    link.symlink_to("/dev/zero")
    with pytest.raises(InputError, match="not a regular file"):
        load_yaml_file(link)


def test_text_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(InputError, match=rf"^{path}:2: not UTF-8 text"):
        load_yaml_file(path)
