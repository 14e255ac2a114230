from __future__ import annotations

import pytest

from orchestrator.errors import InputError
from orchestrator.yamlsource import dotted, parse_yaml


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
