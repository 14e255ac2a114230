"""Built-in drafter profiles, their targets' files, and override merging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.drafters.kinds.dflash.drafter import Published
from orchestrator.drafters.kinds.dflash.rules import check_dflash
from orchestrator.drafters.modelfiles import read_model_dir
from orchestrator.drafters.profiles import (
    detect_profile,
    get_profile,
    list_profiles,
    merge_overrides,
    target_files,
)
from orchestrator.errors import InputError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "drafters"
QWEN36 = "z-lab/Qwen3.6-27B-DFlash"
QWEN3 = "z-lab/Qwen3-8B-DFlash-b16"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_profiles_hold_the_published_configs() -> None:
    assert [p.name for p in list_profiles() if p.kind == "dflash"] == [QWEN3, QWEN36]
    published = fixture("z-lab_Qwen3.6-27B-DFlash.config.json")
    assert get_profile(QWEN36).config == {**published, "use_sliding_window": True}
    assert "use_sliding_window" in get_profile(QWEN36).notes[0]
    assert get_profile(QWEN3).config == fixture("z-lab_Qwen3-8B-DFlash-b16.config.json")


def test_profile_fields_of_the_qwen36_drafter() -> None:
    profile = Published(get_profile(QWEN36))
    assert get_profile(QWEN36).kind == "dflash"
    assert profile.target_name == "Qwen/Qwen3.6-27B"
    assert profile.target == {"num_hidden_layers": 64, "hidden_size": 5120, "vocab_size": 248320}
    assert profile.target_layer_ids == [1, 16, 31, 46, 61]
    assert profile.mask_token_id == 248070
    assert profile.layer_types == ["sliding_attention"] * 4 + ["full_attention"]
    assert profile.sliding_window == 2048
    assert profile.block_size == 16
    assert get_profile(QWEN36).num_hidden_layers == 5


def test_profile_fields_of_the_qwen3_drafter() -> None:
    profile = Published(get_profile(QWEN3))
    assert profile.target_name == "Qwen/Qwen3-8B"
    assert profile.target == {"num_hidden_layers": 36, "hidden_size": 4096, "vocab_size": 151936}
    assert profile.target_layer_ids == [1, 9, 17, 25, 33]
    assert profile.mask_token_id == 151669
    assert profile.sliding_window is None
    assert profile.block_size == 16


def test_profiles_are_fresh_copies() -> None:
    get_profile(QWEN36).config["dflash_config"]["mask_token_id"] = 1
    assert Published(get_profile(QWEN36)).mask_token_id == 248070


def test_an_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(InputError, match=f"'z-lab/Nope'.*{QWEN3}, {QWEN36}"):
        get_profile("z-lab/Nope")


@pytest.mark.parametrize(
    ("drafter", "target", "expected"),
    [
        (None, "Qwen3.6-27B.config.json", QWEN36),
        (None, "Qwen3-8B.config.json", QWEN3),
        ("guessed_Qwen3.6-27B-DFlash.config.json", "Qwen3.6-27B.config.json", QWEN36),
        ("z-lab_Qwen3-8B-DFlash-b16.config.json", "Qwen3-8B.config.json", QWEN3),
        # the target decides: checking against that profile then shows the mismatch
        ("z-lab_Qwen3-8B-DFlash-b16.config.json", "Qwen3.6-27B.config.json", QWEN36),
    ],
)
def test_detect_profile_by_target_and_drafter(
    drafter: str | None, target: str, expected: str | None
) -> None:
    found = detect_profile(fixture(drafter) if drafter else None, fixture(target), "dflash")
    assert (found.name if found else None) == expected


def test_detect_profile_needs_the_drafters_layer_count_to_match() -> None:
    drafter = {**fixture("z-lab_Qwen3.6-27B-DFlash.config.json"), "num_hidden_layers": 8}
    assert detect_profile(drafter, fixture("Qwen3.6-27B.config.json"), "dflash") is None
    target = fixture("Qwen3.6-27B.config.json")
    target["text_config"]["num_hidden_layers"] = 48
    assert detect_profile(None, target, "dflash") is None


@pytest.mark.parametrize(
    ("name", "target"), [(QWEN36, "Qwen3.6-27B.config.json"), (QWEN3, "Qwen3-8B.config.json")]
)
def test_target_files_build_a_target_dir_the_profile_passes_on(
    tmp_path: Path, name: str, target: str
) -> None:
    for file_name, data in target_files(name).items():
        (tmp_path / file_name).write_bytes(data)

    files = read_model_dir(tmp_path)

    assert files.findings == []
    assert files.config == fixture(target)
    profile = get_profile(name)
    assert files.tokenizer_config is not None
    assert (
        check_dflash(
            profile.config, files.config, tokenizer=files.tokenizer_config, profile=profile
        )
        == []
    )


def test_qwen36_tokenizer_holds_the_special_tokens() -> None:
    tokenizer = json.loads(target_files(QWEN36)["tokenizer_config.json"])
    added = {
        int(k): (v["content"], v["special"]) for k, v in tokenizer["added_tokens_decoder"].items()
    }
    assert added[248070] == ("<|audio_start|>", True)
    assert added[248044] == ("<|endoftext|>", True)
    assert added[248045] == ("<|im_start|>", True)
    assert added[248046] == ("<|im_end|>", True)
    assert (tokenizer["bos_token"], tokenizer["eos_token"], tokenizer["pad_token"]) == (
        None,
        "<|im_end|>",
        "<|endoftext|>",
    )


def test_merge_overrides_merges_dicts_and_replaces_the_rest() -> None:
    base = {"a": 1, "dflash_config": {"mask_token_id": 5, "target_layer_ids": [1, 2, 3]}}
    overrides = {"dflash_config": {"target_layer_ids": [4]}, "b": {"c": 2}, "a": None}

    merged = merge_overrides(base, overrides)

    assert merged == {
        "a": None,
        "b": {"c": 2},
        "dflash_config": {"mask_token_id": 5, "target_layer_ids": [4]},
    }
    merged["dflash_config"]["target_layer_ids"].append(9)
    merged["b"]["c"] = 3
    assert base == {"a": 1, "dflash_config": {"mask_token_id": 5, "target_layer_ids": [1, 2, 3]}}
    assert overrides["dflash_config"]["target_layer_ids"] == [4]
    assert overrides["b"] == {"c": 2}


def test_merge_overrides_replaces_a_dict_with_a_scalar_and_back() -> None:
    assert merge_overrides({"x": {"y": 1}}, {"x": 2}) == {"x": 2}
    assert merge_overrides({"x": 2}, {"x": {"y": 1}}) == {"x": {"y": 1}}
