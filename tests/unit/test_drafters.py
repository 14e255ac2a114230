"""DFlash rules against the real published configs and the field's wrong guesses."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.contract import jsonable
from orchestrator.drafters.findings import Finding, Severity
from orchestrator.drafters.kinds.dflash.drafter import IDS, KEYS, MASK, block_size
from orchestrator.drafters.kinds.dflash.layers import build_target_layer_ids
from orchestrator.drafters.kinds.dflash.rules import check_dflash
from orchestrator.drafters.modelfiles import read_model_dir, write_safetensors_stub
from orchestrator.drafters.profiles import Profile, get_profile, merge_overrides, target_files
from orchestrator.lab.models import dflash_layout

FIXTURES = Path(__file__).parent.parent / "fixtures" / "drafters"
QWEN36 = "z-lab/Qwen3.6-27B-DFlash"
QWEN3 = "z-lab/Qwen3-8B-DFlash-b16"
PUBLISHED = {
    QWEN36: ("z-lab_Qwen3.6-27B-DFlash.config.json", "Qwen3.6-27B.config.json"),
    QWEN3: ("z-lab_Qwen3-8B-DFlash-b16.config.json", "Qwen3-8B.config.json"),
}


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def published(name: str = QWEN36) -> dict:
    """The config.json as the drafter's authors published it."""
    return fixture(PUBLISHED[name][0])


def drafter(name: str = QWEN36) -> dict:
    """The config as orch renders it: the profile's (the published one, corrected)."""
    return get_profile(name).config


def target(name: str = QWEN36) -> dict:
    return fixture(PUBLISHED[name][1])


def tokenizer(name: str = QWEN36) -> dict:
    return json.loads(target_files(name)["tokenizer_config.json"])


def tensors(config: dict) -> dict[str, dict]:
    """Header entries as a safetensors file of this layout would hold them."""
    return {
        name: {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}
        for name, (dtype, shape) in dflash_layout(config).items()
    }


def check(
    config: dict,
    name: str = QWEN36,
    *,
    profile: Profile | None = None,
    weights: dict | None = None,
    **kwargs: object,
) -> list[Finding]:
    return check_dflash(
        config,
        target(name),
        tokenizer=tokenizer(name),
        tensors=weights if weights is not None else tensors(drafter(name)),
        profile=profile,
        **kwargs,
    )


def summary(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(finding.severity.value, finding.field) for finding in findings]


def without(config: dict, *fields: str) -> dict:
    return {key: value for key, value in config.items() if key not in fields}


# build_target_layer_ids


@pytest.mark.parametrize(
    ("layers", "drafter_layers", "ids"),
    [
        (36, 5, [1, 9, 17, 25, 33]),
        (64, 5, [1, 16, 31, 46, 61]),
        (48, 5, [1, 12, 23, 34, 45]),
        (64, 1, [32]),
        (37, 1, [18]),
        (11, 3, [1, 4, 8]),  # 4.5 rounds to the even 4, as Python's round() in z-lab's code
        (13, 5, [1, 3, 6, 8, 10]),  # 3.25, 5.5 -> 6 (even), 7.75
    ],
)
def test_default_layer_ids_match_z_lab(layers: int, drafter_layers: int, ids: list[int]) -> None:
    assert build_target_layer_ids(layers, drafter_layers) == ids


def test_default_layer_ids_need_a_drafter_layer() -> None:
    with pytest.raises(ValueError, match="num_draft_layers must be >= 1"):
        build_target_layer_ids(36, 0)


@given(st.data())
def test_default_layer_ids_are_evenly_spread_inside_the_target(data: st.DataObject) -> None:
    drafter_layers = data.draw(st.integers(2, 40), label="k")
    layers = data.draw(st.integers(drafter_layers + 3, 200), label="n")

    ids = build_target_layer_ids(layers, drafter_layers)

    assert len(ids) == drafter_layers
    assert (ids[0], ids[-1]) == (1, layers - 3)
    assert all(0 <= i < layers for i in ids)
    assert all(a < b for a, b in itertools.pairwise(ids))
    exact = [
        round(1 + Fraction(i * (layers - 4), drafter_layers - 1)) for i in range(drafter_layers)
    ]
    assert ids == exact  # same half-to-even rounding, on exact fractions


# block_size


def test_block_size_top_level_nested_or_default() -> None:
    assert block_size(drafter(QWEN3)) == 16
    assert block_size({"block_size": 16, "dflash_config": {"block_size": 8}}) == 8
    assert block_size({}) == 16
    with pytest.raises(ValueError, match="block_size must be an integer >= 2, got '8'"):
        block_size({"dflash_config": {"block_size": "8"}})


# the published drafters pass


@pytest.mark.parametrize("name", [QWEN36, QWEN3])
def test_published_drafters_have_no_findings(name: str) -> None:
    profile = get_profile(name)
    assert check(drafter(name), name, profile=profile, num_speculative_tokens=15) == []
    assert check(drafter(name), name) == []
    assert check_dflash(drafter(name), target(name)) == []


def test_weights_with_a_model_prefix_are_read_too() -> None:
    weights = {f"model.{name}": entry for name, entry in tensors(drafter()).items()}
    assert check(drafter(), weights=weights) == []


# the wrong guesses from the field, one at a time


QWEN36_VARIANTS = {
    "layer ids from a wrong spacing": (
        {"dflash_config": {"target_layer_ids": [1, 17, 33, 49, 63]}},
        [("error", IDS)],
    ),
    "4 of 5 layer ids": (
        {"dflash_config": {"target_layer_ids": [1, 16, 31, 46]}},
        [("error", IDS), ("error", IDS)],  # fc.weight holds 5 layers; the profile has 5
    ),
    "mask 248064 (<|repo_name|>, not special)": (
        {"dflash_config": {"mask_token_id": 248064}},
        [("error", MASK), ("error", MASK)],
    ),
    "mask 151669 (Qwen3-8B's, an ordinary token here)": (
        {"dflash_config": {"mask_token_id": 151669}},
        [("error", MASK), ("error", MASK)],
    ),
    "all layers full attention": (
        {"layer_types": ["full_attention"] * 5},
        [("error", "layer_types")],
    ),
    "another sliding window": ({"sliding_window": 4096}, [("error", "sliding_window")]),
    "Qwen3's rope_theta": ({"rope_theta": 1000000}, [("error", "rope_theta")]),
    "a window override that wins over sliding_window": (
        {"dflash_config": {"swa_window_size": 4096}},
        [("error", "sliding_window"), ("error", "dflash_config.swa_window_size")],
    ),
    "layer ids that win over target_layer_ids": (
        {"eagle_aux_hidden_state_layer_ids": [1, 16, 31, 46, 61]},
        [("error", "eagle_aux_hidden_state_layer_ids")],
    ),
    "the published window the server does not see": (
        {"use_sliding_window": None},
        [("error", "use_sliding_window")],
    ),
    # no server reads these: the field's guesses that change nothing at serve time
    "bos 248044 (<|endoftext|>)": ({"bos_token_id": 248044}, [("warning", "bos_token_id")]),
    "another block size": ({"block_size": 8}, [("warning", "block_size")]),
}


@pytest.mark.parametrize("case", QWEN36_VARIANTS)
def test_each_wrong_guess_is_an_error_against_the_profile(case: str) -> None:
    overrides, expected = QWEN36_VARIANTS[case]
    findings = check(merge_overrides(drafter(), overrides), profile=get_profile(QWEN36))
    assert summary(findings) == expected
    assert all("\n" not in f.message for f in findings)


def test_the_published_qwen36_file_leaves_the_server_without_a_window() -> None:
    """z-lab's file has no use_sliding_window: Qwen3Config drops the window, the profile adds it."""
    [finding] = check(published(), profile=get_profile(QWEN36))
    assert (finding.severity, finding.field) == (Severity.ERROR, "use_sliding_window")
    assert (finding.expected, finding.actual) == (True, None)
    assert "set use_sliding_window: true" in finding.message
    assert drafter() == {**published(), "use_sliding_window": True}


def test_missing_sliding_window_is_an_error() -> None:
    config = without(drafter(), "sliding_window")
    assert summary(check(config)) == [("error", "sliding_window")]
    [finding] = check(config, profile=get_profile(QWEN36))
    assert (finding.field, finding.expected, finding.actual) == ("sliding_window", 2048, None)


def test_the_guessed_config_from_the_field_fails_on_every_guess() -> None:
    guessed = fixture("guessed_Qwen3.6-27B-DFlash.config.json")

    findings = check(guessed, profile=get_profile(QWEN36))

    assert summary(findings) == [
        ("error", IDS),
        ("error", MASK),  # <|repo_name|> is not special
        ("error", MASK),  # and not the published 248070
        ("error", "layer_types"),
        ("warning", "bos_token_id"),  # no server reads it
        ("error", "sliding_window"),
        ("error", "use_sliding_window"),
    ]
    ids = findings[0]
    assert (ids.expected, ids.actual) == ([1, 16, 31, 46, 61], [1, 17, 33, 49, 63])
    assert "acceptance collapses to ~1.1" in ids.message
    assert json.loads(json.dumps(jsonable(findings)))[4] == {
        "severity": "warning",
        "field": "bos_token_id",
        "expected": None,
        "actual": 248044,
        "message": findings[4].message,
    }


def test_without_a_profile_an_unusual_spacing_is_only_a_warning() -> None:
    config = merge_overrides(
        drafter(), {"dflash_config": {"target_layer_ids": [2, 18, 33, 47, 61]}}
    )
    [finding] = check(config)
    assert (finding.severity, finding.field) == (Severity.WARNING, IDS)
    assert finding.expected == [1, 16, 31, 46, 61]


# each rule on its own


RULE_VARIANTS = {
    "not a DFlash architecture": (
        {"architectures": ["Qwen3ForCausalLM"]},
        [("error", "architectures")],
    ),
    "ids out of the target's layers": (
        {"dflash_config": {"target_layer_ids": [1, 16, 31, 46, 64]}},
        [("error", IDS), ("warning", IDS)],
    ),
    "ids not increasing": (
        {"dflash_config": {"target_layer_ids": [16, 1, 31, 46, 61]}},
        [("error", IDS), ("warning", IDS)],
    ),
    "ids not integers": (
        {"dflash_config": {"target_layer_ids": ["1", "16", "31", "46", "61"]}},
        [("error", IDS)],
    ),
    "ids missing": ({"dflash_config": {"target_layer_ids": None}}, [("error", IDS)]),
    "trained on another target (no server reads it)": (
        {"num_target_layers": 48},
        [("warning", "num_target_layers")],
    ),
    "another hidden size": (
        {"hidden_size": 4096},
        [("error", "hidden_size"), ("error", "hidden_size")],  # target, then fc.weight
    ),
    "another vocabulary": ({"vocab_size": 151936}, [("error", "vocab_size")]),
    "mask missing": ({"dflash_config": {"mask_token_id": None}}, [("error", MASK)]),
    "mask past the vocabulary": ({"dflash_config": {"mask_token_id": 248320}}, [("error", MASK)]),
    "mask is the eos token": ({"dflash_config": {"mask_token_id": 248046}}, [("error", MASK)]),
    "mask is the pad token": ({"dflash_config": {"mask_token_id": 248044}}, [("error", MASK)]),
    "mask is an unused row past the added tokens": (
        {"dflash_config": {"mask_token_id": 248100}},
        [],
    ),
    "one layer type too few": (
        {"layer_types": ["sliding_attention"] * 3 + ["full_attention"]},
        [("error", "layer_types")],
    ),
    "unknown layer type": (
        {"layer_types": ["linear_attention"] * 4 + ["full_attention"]},
        [("error", "layer_types")],
    ),
    "zero sliding window": ({"sliding_window": 0}, [("error", "sliding_window")]),
    "block size not a number (no server reads it)": (
        {"block_size": "16"},
        [("warning", "block_size")],
    ),
}


@pytest.mark.parametrize("case", RULE_VARIANTS)
def test_each_rule_without_a_profile(case: str) -> None:
    overrides, expected = RULE_VARIANTS[case]
    assert summary(check(merge_overrides(drafter(), overrides))) == expected


def test_a_config_without_dflash_config() -> None:
    findings = check(without(drafter(), "dflash_config"), profile=get_profile(QWEN36))
    [finding] = findings
    assert (finding.field, finding.expected) == ("dflash_config", drafter()["dflash_config"])


def test_mask_checks_by_token_need_the_tokenizer() -> None:
    config = merge_overrides(drafter(), {"dflash_config": {"mask_token_id": 151669}})
    assert check_dflash(config, target()) == []
    assert summary(check_dflash(config, target(), tokenizer=tokenizer())) == [("error", MASK)]


def test_mask_equal_to_the_target_configs_bos_is_an_error() -> None:
    config = merge_overrides(drafter(QWEN3), {"dflash_config": {"mask_token_id": 151643}})
    findings = check_dflash(config, target(QWEN3))
    assert summary(findings) == [("error", MASK)]
    assert "bos token" in findings[0].message


def test_qwen3_mask_is_fine_on_its_own_target() -> None:
    # 151669 is past Qwen3's last added token (151668 </think>): an unused, trained row
    assert max(int(k) for k in tokenizer(QWEN3)["added_tokens_decoder"]) == 151668
    assert check(drafter(QWEN3), QWEN3) == []


def test_bos_is_not_judged_without_a_profile_as_no_server_reads_it() -> None:
    config = merge_overrides(drafter(QWEN3), {"bos_token_id": None})
    assert check(config, QWEN3) == []


def test_missing_layer_types_is_a_warning_without_a_profile_and_an_error_with_one() -> None:
    config = without(drafter(), "layer_types")
    assert summary(check(config)) == [("warning", "layer_types")]
    assert summary(check(config, profile=get_profile(QWEN36))) == [("error", "layer_types")]


def test_target_fields_are_read_from_text_config_and_must_be_there() -> None:
    flat = {**target(), **target()["text_config"]}
    del flat["text_config"]
    assert check_dflash(drafter(), flat) == []

    broken = {"text_config": without(target()["text_config"], "num_hidden_layers")}
    assert summary(check_dflash(drafter(), broken)) == [("error", "target.num_hidden_layers")]


def test_a_profile_for_another_target_is_an_error() -> None:
    findings = check(drafter(QWEN3), QWEN3, profile=get_profile(QWEN36))
    assert summary(findings)[0] == ("error", "profile")
    assert findings[0].expected == {
        "num_hidden_layers": 64,
        "hidden_size": 5120,
        "vocab_size": 248320,
    }


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [(15, []), (7, []), (16, [("error", "num_speculative_tokens")])],
)
def test_num_speculative_tokens_fits_the_block(tokens: int, expected: list) -> None:
    assert summary(check(drafter(), num_speculative_tokens=tokens)) == expected


def test_block_size_inside_dflash_config_wins() -> None:
    config = merge_overrides(drafter(), {"dflash_config": {"block_size": 8}})
    assert summary(check(config, num_speculative_tokens=15)) == [
        ("error", "num_speculative_tokens")
    ]


# the weights, from real safetensors files


@pytest.fixture
def drafter_dir(tmp_path: Path) -> Path:
    """The published Qwen3.6 drafter's weights as it ships (no config.json), data sparse."""
    path = tmp_path / "Qwen3.6-27B-DFlash"
    path.mkdir()
    layout = dflash_layout(drafter())
    assert layout["fc.weight"] == ("BF16", [5120, 25600])
    write_safetensors_stub(path / "model.safetensors", layout)
    return path


def test_published_weights_match_the_published_config(drafter_dir: Path) -> None:
    files = read_model_dir(drafter_dir)
    assert summary(files.findings) == [("error", "config.json")]
    assert files.tensors is not None
    assert check(drafter(), weights=files.tensors, profile=get_profile(QWEN36)) == []


def test_four_layer_ids_against_five_layer_weights(drafter_dir: Path) -> None:
    config = merge_overrides(drafter(), {"dflash_config": {"target_layer_ids": [1, 16, 31, 46]}})
    tensors_read = read_model_dir(drafter_dir).tensors
    assert tensors_read is not None

    findings = check(config, weights=tensors_read)

    assert summary(findings) == [("warning", IDS), ("error", IDS)]
    assert (findings[1].expected, findings[1].actual) == (5, 4)
    assert "[5120, 25600]" in findings[1].message


def test_layer_count_against_the_weights(tmp_path: Path) -> None:
    layout = dflash_layout(merge_overrides(drafter(), {"num_hidden_layers": 4}))
    write_safetensors_stub(tmp_path / "model.safetensors", layout)
    tensors_read = read_model_dir(tmp_path).tensors
    assert tensors_read is not None

    [finding] = check(drafter(), weights=tensors_read)

    assert (finding.field, finding.expected, finding.actual) == ("num_hidden_layers", 4, 5)


@pytest.mark.parametrize(
    ("fc", "field"),
    [(None, "fc.weight"), ([5120, 25601], "fc.weight"), ([5120], "fc.weight")],
)
def test_a_missing_or_odd_fc_weight_is_an_error(fc: list[int] | None, field: str) -> None:
    weights = tensors(drafter())
    if fc is None:
        del weights["fc.weight"]
    else:
        weights["fc.weight"]["shape"] = fc
    assert summary(check(drafter(), weights=weights)) == [("error", field)]


def test_findings_are_json_data() -> None:
    finding = Finding.warning(IDS, "hint", expected=[1, 2], actual=None)
    assert json.loads(json.dumps(jsonable(finding))) == {
        "severity": "warning",
        "field": IDS,
        "expected": [1, 2],
        "actual": None,
        "message": "hint",
    }
    assert Severity("error") is Severity.ERROR


# the key table: every key of the config, by what vLLM does with it


def with_path(config: dict, path: str, value: object) -> dict:
    """A copy of a config with the dotted `path` set to `value`."""
    *parents, leaf = path.split(".")
    override: dict = {leaf: value}
    for parent in reversed(parents):
        override = {parent: override}
    return merge_overrides(config, override)


READ_KEYS = sorted(path for path, key in KEYS.keys.items() if key.read)
UNREAD_KEYS = sorted(path for path, key in KEYS.keys.items() if not key.read)


@pytest.mark.parametrize("path", READ_KEYS)
def test_overriding_a_key_vllm_reads_is_an_error_naming_it(path: str) -> None:
    findings = check(with_path(drafter(), path, 12345), profile=get_profile(QWEN36))
    assert ("error", path) in summary(findings)


@pytest.mark.parametrize("path", UNREAD_KEYS)
def test_overriding_a_key_no_server_reads_is_a_warning_that_says_so(path: str) -> None:
    findings = check(with_path(drafter(), path, 12345), profile=get_profile(QWEN36))
    assert summary(findings) == [("warning", path)]
    assert "no server reads" in findings[0].message


@pytest.mark.parametrize(
    ("misspelt", "meant"),
    [
        ("dflash_config.target_layer_idz", "dflash_config.target_layer_ids"),
        ("dflash_config.mask_token", "dflash_config.mask_token_id"),
        ("is_neox", "is_neox_style"),
        ("slidingwindow", "sliding_window"),
    ],
)
def test_an_unknown_key_is_an_error_with_the_nearest_known_one(misspelt: str, meant: str) -> None:
    config = with_path(drafter(), misspelt, [1, 16, 31, 46, 61])
    for profile in (get_profile(QWEN36), None):
        [finding] = check(config, profile=profile)
        assert (finding.severity, finding.field, finding.expected) == ("error", misspelt, meant)
        assert f"did you mean {meant}?" in finding.message


def test_an_unknown_key_far_from_every_known_one_is_told_to_go() -> None:
    [finding] = check({**drafter(), "colour": "blue"})
    assert (finding.field, finding.expected) == ("colour", None)
    assert finding.message.endswith("remove it")


def test_a_removed_key_vllm_reads_is_an_error() -> None:
    findings = check(without(drafter(), "rope_theta"), profile=get_profile(QWEN36))
    assert summary(findings) == [("error", "rope_theta")]
    assert findings[0].message.startswith("rope_theta is missing from the published drafter")


def test_a_mask_embedding_file_is_reported() -> None:
    [finding] = check(drafter(), drafter_files=["model.safetensors", "mask_embedding.pt"])
    assert (finding.severity, finding.field) == (Severity.WARNING, "mask_embedding.pt")
    assert check(drafter(), drafter_files=["model.safetensors"]) == []


def test_every_key_of_the_published_configs_is_known() -> None:
    for name in (QWEN36, QWEN3):
        assert KEYS.unknown(published(name)) == []
        assert KEYS.unknown(drafter(name)) == []


def test_the_key_table_names_a_source_for_every_key() -> None:
    for key in KEYS.keys.values():
        assert key.source in KEYS.sources, key.path
        assert key.read is (key.role is not None), key.path
