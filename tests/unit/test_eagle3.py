"""The eagle3 kind: each EAGLE-3 mistake class judged as vLLM 0.34.0 treats it.

Cases start from two heads for Qwen3-8B (tests/fixtures/drafters/eagle3): the
speculators format with the published fields of RedHatAI/Qwen3-8B-speculator.eagle3
(the profile) and a layer of its target's shape, and the same head in the plain
format (an eagle_config block). Each expected verdict cites the vLLM 0.34.0 code
that makes it so (paths under vllm/ in the wheel). Refused at start is an error,
accepted but mis-served an error, harmless a warning or nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli import cli
from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs, detect_kind, get_kind
from orchestrator.drafters.kinds.eagle3.head import (
    PLAIN_KEYS,
    SPECULATORS_KEYS,
    captured_layers,
    config_format,
    fc_width,
    served,
)
from orchestrator.drafters.modelfiles import read_model_dir, write_safetensors_stub
from orchestrator.drafters.profiles import Profile, get_profile

FIXTURES = Path(__file__).parent.parent / "fixtures" / "drafters"
QWEN3_8B = json.loads((FIXTURES / "Qwen3-8B.config.json").read_text())
QWEN36 = json.loads((FIXTURES / "Qwen3.6-27B.config.json").read_text())
PROFILE = "RedHatAI/Qwen3-8B-speculator.eagle3"
IDS = "eagle_aux_hidden_state_layer_ids"
NESTED = "eagle_config.eagle_aux_hidden_state_layer_ids"


def head(form: str, **changes: object) -> dict:
    """A head of `form` (speculators or plain) with dotted-path fields set (None removes)."""
    config = json.loads((FIXTURES / "eagle3" / f"{form}.config.json").read_text())
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = config
        for parent in parents:
            node = node.setdefault(parent, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return config


def weights(
    width: int = 3, draft_vocab: int = 32000, d2t: bool = True, norms: tuple[str, ...] = ()
) -> dict[str, dict]:
    """Safetensors header entries of a head for Qwen3-8B (hidden 4096), with `norms` (names
    of extra norm weights, 4096 wide each)."""
    shapes = {"fc.weight": [4096, width * 4096], "lm_head.weight": [draft_vocab, 4096]}
    if d2t:
        shapes["d2t"] = [draft_vocab]
    shapes.update({name: [4096] for name in norms})
    return {
        name: {"dtype": "BF16", "shape": shape, "data_offsets": [0, 0]}
        for name, shape in shapes.items()
    }


def check(
    config: dict,
    target: dict = QWEN3_8B,
    *,
    tensors: dict[str, dict] | None = None,
    profile: Profile | None = None,
    tokens: int | None = None,
) -> list[Finding]:
    inputs = CheckInputs(
        config, target, tensors=tensors, profile=profile, num_speculative_tokens=tokens
    )
    return get_kind("eagle3").check(inputs)


def verdict(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.severity.value, f.field) for f in findings]


def errors(findings: list[Finding]) -> list[tuple[str, str]]:
    return [found for found in verdict(findings) if found[0] == "error"]


# valid heads in either format: nothing to say


@pytest.mark.parametrize("form", ["speculators", "plain"])
def test_a_valid_head_in_either_format_passes(form: str) -> None:
    profile = get_profile(PROFILE)
    assert check(head(form), tensors=weights(), profile=profile, tokens=3) == []
    unprofiled = check(head(form), tensors=weights(), tokens=3)
    assert all(f.severity == "warning" for f in unprofiled)  # at most: the defaults are used


def test_both_formats_are_recognised_and_a_plain_head_is_never_judged_as_dflash() -> None:
    assert detect_kind(head("speculators")).name == "eagle3"
    assert detect_kind(head("plain")).name == "eagle3"
    assert config_format(head("speculators")) == "speculators"
    assert config_format(head("plain")) == "plain"
    # a plain head whose class names no EAGLE-3 is still one by its eagle_config block
    assert detect_kind(head("plain", architectures=["LlamaForCausalLM"])).name == "eagle3"


def test_the_served_config_is_what_the_speculators_converter_builds() -> None:
    # speculators/algos.py:30-50: copied keys; default norm_before_residual true; class by type
    config = served(head("speculators", norm_before_residual=None, **{IDS: [1, 2, 3]}))
    assert config["norm_before_residual"] is True
    assert config["architectures"] == ["Eagle3LlamaForCausalLM"]
    assert config[IDS] == [1, 2, 3]
    assert config["hidden_size"] == 4096  # from transformer_layer_config
    qwen3 = served(head("speculators", transformer_layer_config__model_type="qwen3"))
    assert qwen3["architectures"] == ["Eagle3Qwen3ForCausalLM"]
    # configs/eagle.py:55-64: a plain class is renamed Eagle3<arch> unless it says Eagle3
    assert served(head("plain", architectures=["Qwen3ForCausalLM"]))["architectures"] == [
        "Eagle3Qwen3ForCausalLM"
    ]


def test_layer_resolution_and_fc_width_follow_vllm() -> None:
    # eagle3_utils.py:103-139, interfaces.py:1764-1785: top-level ids, else the defaults
    assert captured_layers(served(head("plain")), 36) == ([2, 18, 33], IDS)
    assert captured_layers(served(head("plain", **{IDS: None})), 36) == ([2, 18, 33], None)
    assert captured_layers({"eagle_config": {"layer_ids": [4, 5, 6]}}, 36) == (
        [4, 5, 6],
        "eagle_config.layer_ids",
    )
    # llama_eagle3.py:209-216: a llama head's width ignores the top-level ids
    assert fc_width(served(head("speculators", **{IDS: [1, 2, 3, 4]}))) == (3, "the default")
    # qwen3_eagle3.py:201-209: a qwen3 head's width counts them
    qwen3 = head("speculators", transformer_layer_config__model_type="qwen3", **{IDS: [1, 2, 3, 4]})
    assert fc_width(served(qwen3)) == (4, IDS)
    assert fc_width(served(head("plain"))) == (3, NESTED)


# which target layers vLLM captures: eagle3_utils.py:103-139 (0.34.0), in this order


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # :109 the top-level list wins over every other, used as given
        (
            {IDS: [1, 2, 3], "target_layer_ids": [4, 5, 6], "eagle_config": {"layer_ids": [7]}},
            ([1, 2, 3], IDS),
        ),
        # :110-114 dflash_config.target_layer_ids, each + 1, before the dspark and plain lists
        (
            {
                "dflash_config": {"target_layer_ids": [1, 2, 3], "layer_ids": [7]},
                "dspark_target_layer_ids": [4, 5, 6],
            },
            ([2, 3, 4], "dflash_config.target_layer_ids"),
        ),
        # :115-125 dspark_target_layer_ids, each + 1, before target_layer_ids
        (
            {"dspark_target_layer_ids": [4, 5, 6], "target_layer_ids": [1, 2, 3]},
            ([5, 6, 7], "dspark_target_layer_ids"),
        ),
        # :126-130 target_layer_ids, each + 1, before any layer_ids
        (
            {"target_layer_ids": [1, 17, 32], "eagle_config": {"layer_ids": [7, 8, 9]}},
            ([2, 18, 33], "target_layer_ids"),
        ),
        # :131-137 dflash_config.layer_ids, then eagle_config.layer_ids, as given
        (
            {"dflash_config": {"layer_ids": [4, 5, 6]}, "eagle_config": {"layer_ids": [7, 8, 9]}},
            ([4, 5, 6], "dflash_config.layer_ids"),
        ),
        ({"eagle_config": {"layer_ids": [7, 8, 9]}}, ([7, 8, 9], "eagle_config.layer_ids")),
        # :110 `if not layer_ids`: an empty list is no list
        ({IDS: [], "target_layer_ids": [1, 17, 32]}, ([2, 18, 33], "target_layer_ids")),
        # eagle_config's id list is not in the order at all (only its length counts,
        # llama_eagle3.py:213-216): the target's defaults, eagle3_utils.py:24-30
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 17, 32]}}, ([2, 18, 33], None)),
        ({}, ([2, 18, 33], None)),
    ],
)
def test_the_captured_layers_follow_vllms_order(config: dict, expected: tuple) -> None:
    assert captured_layers(config, 36) == expected


@pytest.mark.parametrize(
    ("layers", "expected"), [(36, [2, 18, 33]), (64, [2, 32, 61]), (5, [2, 2, 2])]
)
def test_the_targets_default_layers(layers: int, expected: list) -> None:
    # interfaces.py:1764-1785: (2, num_layers // 2, num_layers - 3)
    assert captured_layers({}, layers) == (expected, None)


def test_the_finding_names_the_key_the_ids_came_from() -> None:
    # a speculators head without top-level ids: vLLM reads transformer_layer_config's
    # target_layer_ids (the converter keeps the layer config whole, speculators/base.py:58-63)
    config = head("speculators", transformer_layer_config__target_layer_ids=[1, 17, 36])
    findings = [f for f in check(config) if f.severity == "error"]
    assert verdict(findings) == [("error", "transformer_layer_config.target_layer_ids")]
    assert findings[0].actual == [2, 18, 37]  # id 37: past the target's 36 layers


# refused at start by vLLM: errors quoting what vLLM says


@pytest.mark.parametrize(
    ("changes", "field", "quote"),
    [
        # speculators/algos.py:39-46
        (
            {"transformer_layer_config__model_type": "mistral"},
            "transformer_layer_config.model_type",
            "Unsupported model_type mistral for Eagle3 speculator",
        ),
        # speculators/base.py:51-56
        ({"speculators_model_type": "eagle"}, "speculators_model_type", "Expected one of"),
        # speculators/algos.py:53-55 (0.32.0 served it as eagle3 with parallel drafting)
        ({"speculators_model_type": "peagle"}, "speculators_model_type", "P-EAGLE"),
        # transformers_utils/config.py:366-372: parsed as a plain llama config
        ({"model_type": "llama"}, "model_type", "are not supported"),
        # transformers_utils/config.py:366-372: not recognised as speculators at all
        ({"speculators_config": None}, "speculators_config", "Unrecognized model"),
    ],
)
def test_a_speculators_head_vllm_refuses_is_an_error_quoting_it(
    changes: dict, field: str, quote: str
) -> None:
    errors = [f for f in check(head("speculators", **changes)) if f.severity == "error"]
    assert field in {f.field for f in errors}
    assert any(quote in f.message for f in errors if f.field == field)


def test_a_plain_head_of_a_class_vllm_lacks_is_refused() -> None:
    # transformers_utils/configs/eagle.py:55-64, models/registry.py:732-744
    findings = check(head("plain", architectures=["MistralForCausalLM"], model_type="mistral"))
    assert verdict(findings)[:1] == [("error", "architectures")]
    assert "Eagle3MistralForCausalLM" in findings[0].message


def test_a_speculators_head_without_its_layer_config_is_an_error() -> None:
    # speculators/base.py:58-63: the head's config is transformer_layer_config
    assert ("error", "transformer_layer_config") in verdict(
        check(head("speculators", transformer_layer_config=None))
    )


# accepted by vLLM but served wrong: errors naming what it costs


@pytest.mark.parametrize("form", ["speculators", "plain"])
@pytest.mark.parametrize(
    ("ids", "why"),
    [
        ([2, 18, 37], "outside 0..36"),  # models/qwen2.py:420-431: 37 is never captured
        ([2, 18, 18], "names a layer twice"),  # interfaces.py:1653-1663: captured once
    ],
)
def test_layer_ids_the_target_cannot_feed_are_errors(form: str, ids: list, why: str) -> None:
    changes = {IDS: ids}
    if form == "plain":
        changes["eagle_config__eagle_aux_hidden_state_layer_ids"] = ids
    findings = [f for f in check(head(form, **changes)) if f.field == IDS]
    assert [(f.severity.value, why in f.message) for f in findings][:1] == [("error", True)]


def test_the_last_layers_output_is_a_valid_id() -> None:
    # models/qwen2.py:420-431: id n is layer n - 1's output; ids run 0..n inclusive
    ids = [0, 18, 36]
    assert (
        check(head("plain", eagle_config__eagle_aux_hidden_state_layer_ids=ids, **{IDS: ids})) == []
    )


def test_ids_only_in_eagle_config_are_silently_replaced_by_the_targets_defaults() -> None:
    # eagle3_utils.py:103-139 never reads eagle_config.eagle_aux_hidden_state_layer_ids;
    # llama_eagle3.py:213-216 takes only its length: the head is fed (2, 18, 33)
    config = head(
        "plain", eagle_config__eagle_aux_hidden_state_layer_ids=[1, 17, 32], **{IDS: None}
    )
    [finding] = [f for f in check(config) if f.severity == "error"]
    assert (finding.field, finding.expected, finding.actual) == (NESTED, [1, 17, 32], [2, 18, 33])
    assert "never reads it to choose layers" in finding.message
    assert IDS in finding.message  # the key vLLM would read is named


def test_ids_only_in_a_speculators_layer_configs_eagle_config_are_named() -> None:
    # the converter keeps transformer_layer_config whole (speculators/base.py:58-63), so its
    # eagle_config reaches the head; eagle3_utils.py:103-139 still never reads its id list
    # for the capture (only llama_eagle3.py:213-216 its length): the defaults (2, 18, 33)
    nested = "transformer_layer_config.eagle_config.eagle_aux_hidden_state_layer_ids"
    config = head(
        "speculators",
        transformer_layer_config__eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 17, 32]},
    )
    [finding] = [f for f in check(config) if f.field == nested]
    assert (finding.severity.value, finding.expected, finding.actual) == (
        "warning",
        [1, 17, 32],
        [2, 18, 33],
    )
    assert f"vLLM reads the top-level {IDS} instead" in finding.message
    assert "algos.py:47-50" in finding.message
    # the same list copied to the top level is what vLLM captures: nothing to say of it
    fixed = head(
        "speculators",
        transformer_layer_config__eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 17, 32]},
        **{IDS: [1, 17, 32]},
    )
    assert [f for f in check(fixed) if f.field == nested] == []


@pytest.mark.parametrize(
    ("key", "value", "read"),
    [
        # speculators/algos.py:33-35: the top-level flag, default true, replaces the layer's
        ("norm_before_residual", False, True),
        # algos.py:30: draft_vocab_size comes from the top level (32000 in the fixture)
        ("draft_vocab_size", 151936, 32000),
        # algos.py:47-50: the top-level ids replace the layer's when set
        (IDS, [1, 17, 32], [2, 18, 33]),
    ],
)
def test_a_layer_config_key_the_converter_replaces_is_named(
    key: str, value: object, read: object
) -> None:
    top = {IDS: [2, 18, 33]} if key == IDS else {}
    config = head("speculators", **{f"transformer_layer_config__{key}": value}, **top)
    [finding] = [f for f in check(config) if f.field == f"transformer_layer_config.{key}"]
    assert (finding.severity.value, finding.expected, finding.actual) == ("warning", read, value)
    assert f"from the top-level {key}" in finding.message


def test_layer_ids_only_in_the_layer_config_are_read_there() -> None:
    # algos.py:47-50 copies the top-level ids only when set: the layer's own list is read
    config = head(
        "speculators", transformer_layer_config__eagle_aux_hidden_state_layer_ids=[2, 18, 33]
    )
    assert check(config) == []


def test_more_ids_than_a_llama_heads_fc_takes_is_an_error() -> None:
    # llama_eagle3.py:209-216: width from num_aux_hidden_states or eagle_config, else 3
    findings = check(head("speculators", **{IDS: [2, 12, 24, 33]}), tensors=weights(width=4))
    errors = verdict([f for f in findings if f.severity == "error"])
    assert ("error", IDS) in errors  # fed 4, fc takes 3: the first forward fails
    assert ("error", "transformer_layer_config.num_aux_hidden_states") in errors  # weights: 4
    fixed = head(
        "speculators", transformer_layer_config__num_aux_hidden_states=4, **{IDS: [2, 12, 24, 33]}
    )
    assert check(fixed, tensors=weights(width=4)) == []


def test_ids_other_than_the_head_was_trained_on_are_an_error() -> None:
    # the profile sets none: the head was trained on the target's defaults (2, 18, 33)
    findings = check(head("speculators", **{IDS: [1, 17, 32]}), profile=get_profile(PROFILE))
    assert verdict(findings) == [("error", IDS)]
    assert findings[0].expected == [2, 18, 33]


@pytest.mark.parametrize(
    ("changes", "tensors", "field"),
    [
        # llama_eagle3.py:218-221: fc reads hidden states of the head's width
        ({"transformer_layer_config__hidden_size": 5120}, None, "target_hidden_size"),
        ({"target_hidden_size": 5120}, None, "target_hidden_size"),
        # llama_eagle3.py:364-386: draft ids are mapped into the head's vocab_size
        (
            {"transformer_layer_config__vocab_size": 248320},
            None,
            "transformer_layer_config.vocab_size",
        ),
        # llama_eagle3.py:338-345, 376-386: no d2t: every draft id lands on the wrong token
        ({}, weights(d2t=False), "draft_vocab_size"),
        # llama_eagle3.py:329-334: lm_head rows must be draft_vocab_size
        ({"draft_vocab_size": 64000}, weights(), "draft_vocab_size"),
        # llama_eagle3.py:209-221: fc trained for 4 hidden states, sized for 3
        ({}, weights(width=4), "transformer_layer_config.num_aux_hidden_states"),
    ],
)
def test_a_head_vllm_serves_wrong_is_an_error(
    changes: dict, tensors: dict | None, field: str
) -> None:
    findings = check(head("speculators", **changes), tensors=tensors)
    assert ("error", field) in verdict(findings)


def test_a_head_for_another_target_is_an_error() -> None:
    errors = {f.field for f in check(head("speculators"), QWEN36) if f.severity == "error"}
    assert {"target_hidden_size", "transformer_layer_config.vocab_size"} <= errors


# norm flags and the weights: judged without a profile


FC_NORMS = ("fc_norm.0.weight", "fc_norm.1.weight", "fc_norm.2.weight")


@pytest.mark.parametrize(
    ("form", "changes", "norms", "field"),
    [
        # llama_eagle3.py:223-229 builds input_norm; its load_weights (:411-448) returns no
        # loaded set, so model_loader/default_loader.py:540-560 never checks it: it keeps
        # its initial weight of ones (layers/layernorm.py:65)
        ("speculators", {"norm_before_fc": True}, (), "norm_before_fc"),
        # llama_eagle3.py:442-443: input_norm. weights dropped when norm_before_fc is off
        ("speculators", {}, ("input_norm.weight",), "norm_before_fc"),
        # llama_eagle3.py:184-188: eagle_config.norm_before_fc wins over the top-level flag
        (
            "plain",
            {"norm_before_fc": True, "eagle_config__norm_before_fc": False},
            ("input_norm.weight",),
            "eagle_config.norm_before_fc",
        ),
        # llama_eagle3.py:231-240: fc_norm builds one norm per hidden state, same load path
        ("speculators", {"fc_norm": True}, (), "fc_norm"),
        # models/utils.py:449-459: an fc_norm weight without fc_norm has nowhere to go
        ("speculators", {}, FC_NORMS, "fc_norm"),
        # qwen3_eagle3.py:216-233, 389-424: a qwen3 head builds and loads them alike
        (
            "speculators",
            {"transformer_layer_config__model_type": "qwen3"},
            ("input_norm.weight",),
            "norm_before_fc",
        ),
    ],
)
def test_a_norm_flag_its_weights_contradict_is_an_error(
    form: str, changes: dict, norms: tuple, field: str
) -> None:
    findings = check(head(form, **changes), tensors=weights(norms=norms))
    assert errors(findings) == [("error", field)]


@pytest.mark.parametrize(
    ("form", "changes", "norms"),
    [
        ("speculators", {"norm_before_fc": True}, ("input_norm.weight",)),
        ("speculators", {"fc_norm": True}, FC_NORMS),
        ("plain", {"eagle_config__norm_before_fc": True}, ("input_norm.weight",)),
        ("plain", {"norm_before_fc": True, "eagle_config__norm_before_fc": False}, ()),
    ],
)
def test_a_norm_flag_its_weights_agree_with_passes(form: str, changes: dict, norms: tuple) -> None:
    assert errors(check(head(form, **changes), tensors=weights(norms=norms))) == []


@pytest.mark.parametrize(
    ("form", "field"),
    [("speculators", "transformer_layer_config.hidden_act"), ("plain", "hidden_act")],
)
def test_an_activation_vllm_does_not_build_is_an_error(form: str, field: str) -> None:
    # llama.py:112-115 (qwen2.py:105-108 for qwen3): "Unsupported activation", at build
    prefix = "transformer_layer_config__" if form == "speculators" else ""
    findings = check(head(form, **{f"{prefix}hidden_act": "gelu"}))
    assert errors(findings) == [("error", field)]
    assert any("Only silu is supported" in f.message for f in findings if f.field == field)


def test_a_norm_flag_without_weights_is_judged_only_against_a_published_value() -> None:
    # norm_before_residual and norm_output add no weight (llama_eagle3.py:98-104, 252-256):
    # without a published value nothing tells how the head was trained
    config = head("speculators", norm_before_residual=False, norm_output=True)
    assert errors(check(config, tensors=weights())) == []
    published = Profile(
        "published", "eagle3", "Qwen/Qwen3-8B", {}, head("speculators", norm_before_residual=True)
    )
    # a published value is compared (norm_output is not published here: unknown, not judged)
    assert verdict(check(config, profile=published)) == [("error", "norm_before_residual")]


def test_every_value_that_silently_costs_acceptance_says_what_is_judged_without_a_profile() -> None:
    for table in (SPECULATORS_KEYS, PLAIN_KEYS):
        for key in table.keys.values():
            if "acceptance lost silently" in key.effect:
                assert key.without_profile in table.sources, key.path


# harmless: warnings or nothing


def test_what_vllm_never_reads_through_speculative_config_is_a_warning() -> None:
    profile = get_profile(PROFILE)
    config = head("speculators", speculators_config__verifier={"name_or_path": "Qwen/Qwen3-14B"})
    # transformers_utils/config.py:870-919: read only when the head dir is --model
    assert verdict(check(config, profile=profile)) == [
        ("warning", "speculators_config.verifier.name_or_path")
    ]
    # speculators/algos.py:30-50: a top-level eagle_config is not copied
    unread = check(
        head("speculators", eagle_config={"use_aux_hidden_state": False}), profile=profile
    )
    assert verdict(unread) == [("warning", "eagle_config")]
    assert "changes nothing" in unread[0].message


def test_more_steps_than_trained_is_a_warning() -> None:
    [finding] = check(head("speculators"), profile=get_profile(PROFILE), tokens=5)
    assert (finding.severity.value, finding.field, finding.expected) == (
        "warning",
        "num_speculative_tokens",
        3,
    )


def test_unsorted_ids_are_a_warning() -> None:
    # models/qwen2.py:420-431: captured in layer order
    ids = [33, 2, 18]
    findings = check(
        head("plain", eagle_config__eagle_aux_hidden_state_layer_ids=ids, **{IDS: ids})
    )
    assert verdict(findings) == [("warning", IDS)]


def test_no_ids_and_no_profile_warns_that_the_defaults_are_used() -> None:
    [finding] = check(head("speculators"))
    assert (finding.severity.value, finding.field, finding.expected) == (
        "warning",
        IDS,
        [2, 18, 33],
    )


def test_unknown_keys_name_the_nearest_known_one() -> None:
    misspelt = check(head("plain", eagle_aux_hidden_state_layers_ids=[2, 18, 33]))
    [finding] = [f for f in misspelt if f.field == "eagle_aux_hidden_state_layers_ids"]
    assert finding.severity == "error"  # near a key vLLM reads: what was meant is not set
    assert f"did you mean {IDS}?" in finding.message
    [stray] = check(head("plain", my_note="trained in May"))
    assert (stray.severity.value, stray.field) == ("warning", "my_note")


def test_every_key_names_a_source() -> None:
    for table in (SPECULATORS_KEYS, PLAIN_KEYS):
        for key in table.keys.values():
            assert key.source in table.sources, key.path
        assert "vllm 0.34.0" in " ".join(table.sources.values())
    assert SPECULATORS_KEYS.unknown(head("speculators")) == []
    assert PLAIN_KEYS.unknown(head("plain")) == []


# the lab's head and the CLI


def test_the_labs_head_passes_with_its_weights(tmp_path: Path) -> None:
    from orchestrator.lab.models import published_drafter_config, write_eagle3_dir

    profile = get_profile(PROFILE)
    config = published_drafter_config(PROFILE)
    write_eagle3_dir(tmp_path, config)
    files = read_model_dir(tmp_path)
    assert check(config, profile=profile, tensors=files.tensors) == []


def test_a_head_without_aux_hidden_states_captures_nothing() -> None:
    # spec_decode/eagle/config.py:68-72, llama_eagle3.py:209: no fc, no capture
    config = head("plain", eagle_config__use_aux_hidden_state=False, **{IDS: [2, 18, 99]})
    tensors = {name: entry for name, entry in weights().items() if name != "fc.weight"}
    assert check(config, tensors=tensors) == []


def test_a_qwen3_speculators_head_passes_verify_config(tmp_path: Path) -> None:
    # speculators/algos.py:39-46: a qwen3 layer config is served as Eagle3Qwen3ForCausalLM,
    # whose fc takes 3 hidden states by default (qwen3_eagle3.py:201-214): weights of 3
    config = head("speculators", transformer_layer_config__model_type="qwen3", **{IDS: [2, 18, 33]})
    (tmp_path / "head").mkdir()
    (tmp_path / "head" / "config.json").write_text(json.dumps(config))
    layout = {name: ("BF16", entry["shape"]) for name, entry in weights().items()}
    write_safetensors_stub(tmp_path / "head" / "model.safetensors", layout)
    (tmp_path / "target.json").write_text(json.dumps(QWEN3_8B))
    arguments = ["verify-config", "--drafter", str(tmp_path / "head")]
    arguments += ["--target", str(tmp_path / "target.json"), "--num-speculative-tokens", "3"]
    done = CliRunner().invoke(cli, [*arguments, "--json"], env={"ORCH_INVENTORY": None})
    document = json.loads(done.stdout)
    assert (done.exit_code, document["findings"]) == (0, []), done.stdout
    assert document["judged_as"]["kind"] == "eagle3"
    # the same head with fc weights for 4 hidden states: vLLM fails to load them
    layout["fc.weight"] = ("BF16", [4096, 4 * 4096])
    write_safetensors_stub(tmp_path / "head" / "model.safetensors", layout)
    failed = CliRunner().invoke(cli, arguments, env={"ORCH_INVENTORY": None})
    assert failed.exit_code == 1, failed.stdout


def test_a_heads_own_ids_are_what_it_was_trained_on_when_no_profile_is_asked_for(
    tmp_path: Path,
) -> None:
    """The false alarm: a head whose own config captures [2, 18, 36] of a 36-layer
    Qwen3-8B (36: the last layer's output, models/qwen2.py:420-431) was failed as "trained
    on [2, 18, 33]" because verify-config found RedHatAI's profile by the target's shape.
    No profile named: its ids are the head's, a warning names the published head's;
    with `--profile` it is judged as that head, and the difference is an error."""
    config = head("speculators", **{IDS: [2, 18, 36]})
    (tmp_path / "head").mkdir()
    (tmp_path / "head" / "config.json").write_text(json.dumps(config))
    layout = {name: ("BF16", entry["shape"]) for name, entry in weights().items()}
    write_safetensors_stub(tmp_path / "head" / "model.safetensors", layout)
    (tmp_path / "target.json").write_text(json.dumps(QWEN3_8B))
    arguments = ["verify-config", "--drafter", str(tmp_path / "head")]
    arguments += ["--target", str(tmp_path / "target.json"), "--json"]

    no_inventory = {"ORCH_INVENTORY": None}
    found = CliRunner().invoke(cli, arguments, env=no_inventory)
    named = CliRunner().invoke(cli, [*arguments, "--profile", PROFILE], env=no_inventory)

    [warning] = json.loads(found.stdout)["findings"]
    assert (found.exit_code, warning["severity"], warning["field"]) == (0, "warning", IDS)
    assert "the head declares [2, 18, 36]" in warning["message"]
    assert (
        f"{PROFILE}, published for the same target (Qwen/Qwen3-8B), captures [2, 18, 33]"
        in (warning["message"])
    )
    [error] = json.loads(named.stdout)["findings"]
    assert (named.exit_code, error["severity"], error["expected"]) == (1, "error", [2, 18, 33])


def test_a_head_that_is_the_profiles_config_is_judged_by_the_profile() -> None:
    """Unnamed but the profile's own config: the profile's layers are the reference
    (no warning that the defaults may be wrong: they are what the published head uses)."""
    profile = get_profile(PROFILE)

    def on_ids(config: dict) -> list[tuple[str, str]]:
        inputs = CheckInputs(config, QWEN3_8B, profile=profile, profile_named=False)
        return [found for found in verdict(get_kind("eagle3").check(inputs)) if IDS in found[1]]

    assert on_ids(profile.config) == []
    assert on_ids(head("speculators", **{IDS: None})) == [("warning", IDS)]  # defaults, unsaid
