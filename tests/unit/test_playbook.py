from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import InputError
from orchestrator.playbook import find_playbook, load_playbook

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = Path(__file__).parent.parent / "fixtures" / "playbooks"
QWEN = ROOT / "playbooks" / "qwen-dflash.yaml"


def test_shipped_playbook_is_valid_and_found_by_name() -> None:
    assert find_playbook("qwen-dflash") == QWEN
    playbook = load_playbook(QWEN)
    assert playbook.drafter.profile == "z-lab/Qwen3.6-27B-DFlash"
    assert playbook.server.num_speculative_tokens == 15
    assert playbook.targets == ["gpu"]


def test_unknown_playbook_name_lists_the_known_ones() -> None:
    with pytest.raises(InputError, match=r"no playbook 'nope' \(known: .*qwen-dflash"):
        find_playbook("nope")


def test_set_overrides_nested_free_form_values_parsed_as_yaml() -> None:
    playbook = load_playbook(
        QWEN,
        ["drafter.overrides.dflash_config.target_layer_ids=[1,17,33,49,63]", "server.port=8001"],
    )
    assert playbook.drafter.overrides == {
        "dflash_config": {"target_layer_ids": [1, 17, 33, 49, 63]}
    }
    assert playbook.server.port == 8001


def test_set_unknown_path_names_the_field_meant_or_lists_the_fields() -> None:
    with pytest.raises(
        InputError, match=r"unknown field 'server.prot' \(did you mean 'server.port'"
    ):
        load_playbook(QWEN, ["server.prot=8001"])
    with pytest.raises(InputError, match=r"unknown field 'gate.zzz' \(fields here: .*min_drafts"):
        load_playbook(QWEN, ["gate.zzz=1"])


def test_set_below_a_scalar_is_an_error() -> None:
    with pytest.raises(InputError, match=r"server\.port is not a section with fields"):
        load_playbook(QWEN, ["server.port.x=1"])


def test_set_without_equals_is_an_error() -> None:
    with pytest.raises(InputError, match="expected PATH=VALUE"):
        load_playbook(QWEN, ["server.port"])


def test_invalid_value_from_set_is_blamed_on_the_flag() -> None:
    with pytest.raises(InputError) as caught:
        load_playbook(QWEN, ["server.port=seventy"])
    assert str(caught.value).startswith("--set server.port: server.port: ")


def test_schema_errors_name_line_and_field_in_file_order() -> None:
    with pytest.raises(InputError) as caught:
        load_playbook(FIXTURES / "bad-gate.yaml")
    lines = str(caught.value).splitlines()
    source = FIXTURES / "bad-gate.yaml"
    assert lines[0].startswith(f"{source}:10:3: gate.confidence: ")
    assert (
        lines[1]
        == f"{source}:12:5: gate.probe.concurency: unknown field (did you mean 'concurrency'?)"
    )


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("server.stop_timeout=.inf", "server.stop_timeout: Input should be a finite number"),
        ("server.stop_timeout=.nan", "server.stop_timeout: Input should be a finite number"),
        ("server.stop_timeout=-1", "server.stop_timeout: Input should be greater than 0"),
        ("gate.ready_timeout=1.0e+300", "gate.ready_timeout: Input should be less than or equal"),
        ("gate.min_drafts=1000000000000", "gate.min_drafts: Input should be less than or equal"),
        ("gate.confidence=.nan", "gate.confidence: Input should be a finite number"),
        ("server.num_speculative_tokens=100000", "server.num_speculative_tokens: Input should be"),
    ],
)
def test_numbers_must_be_finite_and_in_range(assignment: str, message: str) -> None:
    with pytest.raises(InputError, match=rf"^--set {assignment.split('=')[0]}: {message}"):
        load_playbook(QWEN, [assignment])


def test_set_value_is_parsed_with_the_same_bounds_as_files() -> None:
    nested = "drafter.overrides.x=" + "[" * 200 + "]" * 200
    with pytest.raises(InputError, match=r"^--set drafter.overrides.x:1: nested deeper"):
        load_playbook(QWEN, [nested])
    levels = ["l0: &l0 [" + ", ".join(["lol"] * 9) + "]"]
    levels += [f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, 9)]
    bomb = "drafter.overrides.x={" + ", ".join(levels) + "}"
    with pytest.raises(InputError, match=r"^--set drafter.overrides.x:1:\d+: aliases expand"):
        load_playbook(QWEN, [bomb])


@pytest.mark.parametrize(
    ("typo", "line"),
    [
        ("  wieghts:", "drafter.wieghts: unknown field (did you mean 'weights'?)"),
        ("    max_token:", "gate.probe.max_token: unknown field (did you mean 'max_tokens'?)"),
        ("rolout:", "rolout: unknown field (did you mean 'rollout'?)"),
        ("  colour:", "server.colour: unknown field"),  # nothing close: no guess
    ],
)
def test_a_mistyped_key_gets_the_field_it_is_closest_to(
    tmp_path: Path, typo: str, line: str
) -> None:
    original = {
        "  wieghts:": "  weights:",
        "    max_token:": "    max_tokens:",
        "rolout:": "rollout:",
        "  colour:": "  port:",
    }[typo]
    text = find_playbook("qwen-dflash").read_text()
    assert f"\n{original}" in text
    path = tmp_path / "typo.yaml"
    path.write_text(text.replace(f"\n{original}", f"\n{typo}", 1))
    with pytest.raises(InputError) as caught:
        load_playbook(path)
    assert any(found.endswith(f": {line}") for found in str(caught.value).splitlines()), str(
        caught.value
    )


@pytest.mark.parametrize(
    ("assignments", "levels"),
    [
        ([], [1, 8]),
        (["gate.speed.production_concurrency=32"], [1, 32]),
        (["gate.speed.production_concurrency=1"], [1]),
        (["gate.speed.concurrency=[16, 1, 4]"], [1, 4, 16]),
    ],
)
def test_speed_is_measured_at_one_stream_and_the_production_concurrency(
    assignments: list[str], levels: list[int]
) -> None:
    assert load_playbook(QWEN, assignments).gate.speed.levels() == levels


@pytest.mark.parametrize(
    ("assignment", "says"),
    [
        ("gate.speed.concurrency=[1, 8, 1]", "concurrency levels repeat"),
        ("gate.speed.concurrency=[]", "gate.speed.concurrency"),
        ("gate.speed.max_regression=1.5", "gate.speed.max_regression"),
        ("gate.speed.min_speedup=0", "gate.speed.min_speedup"),
    ],
)
def test_a_speed_setting_out_of_range_names_its_field(assignment: str, says: str) -> None:
    with pytest.raises(InputError, match=says):
        load_playbook(QWEN, [assignment])
