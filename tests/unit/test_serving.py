"""The vLLM capability table, its loader and the judge of a launch against a version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.drafters.findings import Finding, Severity
from orchestrator.drafters.profiles import get_profile, target_files
from orchestrator.errors import InputError
from orchestrator.inventory import load_inventory
from orchestrator.plan import LAUNCH_SCRIPT, plan_deploy
from orchestrator.playbook import load_playbook
from orchestrator.serving.acceptance_source import auto_source
from orchestrator.serving.capabilities import (
    V2_SELECTED,
    UnknownVersion,
    capabilities_for,
    first_release_where,
    load_table,
    newest_version,
)
from orchestrator.serving.judge import Launch, judge_server, read_launch

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = Path(__file__).parent.parent / "fixtures" / "drafters"
DRAFTER = get_profile("z-lab/Qwen3.6-27B-DFlash").config
TARGET = json.loads(target_files("z-lab/Qwen3.6-27B-DFlash")["config.json"])
PLAYBOOK_LAUNCH = Launch({}, None, "dflash")
RUNNER = "VLLM_USE_V2_MODEL_RUNNER"


def launch_with(**env: str) -> Launch:
    return Launch(env, None, "dflash")


# --- the table -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "release"), [("0.26.0rc1", "0.26.0"), ("v0.27.1+cu129", "0.27.1")]
)
def test_a_pre_release_or_a_local_build_is_judged_by_its_release(
    version: str, release: str
) -> None:
    """The rows' facts are checked against the wheels (tests/local/test_wheelfacts.py);
    here, which row a version string finds."""
    found = capabilities_for(version)
    assert found.row == capabilities_for(release).row and release in found.row.releases
    assert not found.assumed


def test_rows_do_not_overlap_and_ascend() -> None:
    table = load_table()
    probes = [f"0.{minor}.{patch}" for minor in range(10, 36) for patch in range(3)]
    for probe in probes:
        covering = [row for row in table.rows if row.range.contains(probe)]
        assert len(covering) <= 1, probe


def test_a_newer_release_is_judged_as_the_newest_row_and_marked_assumed() -> None:
    found = capabilities_for("0.35.2")
    assert found.assumed
    assert found.row == load_table().rows[-1]
    assert newest_version() == "0.34.0"
    assert not capabilities_for(newest_version()).assumed


def test_upgrade_targets_come_from_the_rows() -> None:
    after = capabilities_for("0.21.1").version
    assert first_release_where(lambda r: r.mixed_attention_drafters == V2_SELECTED, after) == (
        "0.26.0"
    )
    assert first_release_where(lambda r: r.serves("dflash"), capabilities_for("0.9").version) == (
        "0.20.0"
    )
    assert first_release_where(lambda r: not r.serves("dflash"), after) is None


@pytest.mark.parametrize("text", ["", "latest", "0.27.1 (git sha)", "\x00", "x" * 500])
def test_bad_version_strings_raise_unknown_version(text: str) -> None:
    with pytest.raises(UnknownVersion):
        capabilities_for(text)


@given(st.text(max_size=40))
def test_no_version_string_is_a_traceback(text: str) -> None:
    """Any text finds a row of the table or is refused saying it is not a version."""
    try:
        found = capabilities_for(text)
    except UnknownVersion as refused:
        assert str(refused).endswith("is not a version"), refused
    else:
        assert found.row in load_table().rows


ROW = """\
  - range: ">=0.1"
    releases: [0.1.0]
    methods: [dflash]
    mixed_attention_drafters: null
    error: null
    runner_values: null
    lm_head_zero_for_conditional_generation: false
    drafter_attention_backend: target
    v2_refused_methods: {}
    request_temperature_max: null
    attention_backend_env_read: false
    health_503_while_warming: false
    per_request_spec_decode_metrics: false
    quotes: {}
    sources: {methods: here}
"""


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("rows: []\nnewest_release: '1'\n", ":1:1: rows", "has no rows"),
        (f"rows:\n{ROW}", ":1:1: newest_release", "required field is missing"),
        (
            f"newest_release: '1.0'\nrows:\n{ROW.replace('    sources: {methods: here}', '')}",
            ":3:5: rows.0.sources",
            "required field is missing",
        ),
        (
            f"newest_release: '1.0'\nrows:\n{ROW.replace('>=0.1', 'at least one')}",
            ":3:5: rows.0.range",
            "not a version specifier",
        ),
        (
            f"newest_release: '1.0'\nrows:\n{ROW.replace('[dflash]', '[1]')}",
            ":5:5: rows.0.methods",
            "expected a list of method names",
        ),
        (
            f"newest_release: '1.0'\nrows:\n{ROW.replace('drafters: null', 'drafters: maybe')}",
            ":6:5: rows.0.mixed_attention_drafters",
            "expected one of",
        ),
        (
            f"newest_release: '1.0'\nrows:\n{ROW}    colour: red\n",
            ":18:5: rows.0.colour",
            "unknown field",
        ),
        (f"newest_release: '0.0.1'\nrows:\n{ROW}", ":1:1: newest_release", "last row's range"),
        (f"newest_release: x\nrows:\n{ROW}", ":1:1: newest_release", "not a version"),
    ],
)
def test_a_broken_table_names_file_line_and_field(
    tmp_path: Path, text: str, where: str, problem: str
) -> None:
    path = tmp_path / "vllm.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_table(path)
    message = str(caught.value)
    assert message.startswith(f"{path}{where}"), message
    assert problem in message


# --- reading a launch script -----------------------------------------------------------------


def test_the_rendered_playbook_launch_reads_back_as_its_settings() -> None:
    playbook = load_playbook(ROOT / "playbooks" / "qwen-dflash.yaml")
    [plan] = plan_deploy(playbook, load_inventory(ROOT / "inventories" / "example.yaml"), ["ct129"])
    launch = read_launch(plan.files[LAUNCH_SCRIPT].decode())
    assert launch == PLAYBOOK_LAUNCH


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("exec vllm serve /m --attention-backend=triton_attn", Launch({}, "triton_attn", None)),
        ("export A='x y'\n# export B=1\nvllm serve /m", Launch({"A": "x y"}, None, None)),
        ("vllm serve --speculative-config '{not json'", Launch()),
        ("vllm serve --speculative-config '[1]'", Launch()),
        ("export 'unterminated", Launch()),
    ],
)
def test_launch_scripts_are_read_as_the_shell_splits_them(script: str, expected: Launch) -> None:
    assert read_launch(script) == expected


# --- the judge ---------------------------------------------------------------------------------


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == Severity.ERROR]


def test_the_playbook_launch_on_every_version_that_serves_the_pair_has_no_findings() -> None:
    """Checked on the host by the server's own dry run, or with V2 forced, nothing is left;
    judged by the table alone, 0.29.0 - 0.33.0 warn of the V1 fallback (see below)."""
    for version in ("0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.32.0", "0.33.0", "0.34.0"):
        checked = judge_server(version, PLAYBOOK_LAUNCH, DRAFTER, TARGET, server_checked=True)
        assert checked == [], version
        assert judge_server(version, launch_with(**{RUNNER: "1"}), DRAFTER, TARGET) == []
    for version in ("0.26.0", "0.27.1", "0.28.0", "0.34.0"):
        assert judge_server(version, PLAYBOOK_LAUNCH, DRAFTER, TARGET) == [], version


@pytest.mark.parametrize("value", ["0", "true", "2", "01", ""])
def test_on_0_34_every_runner_value_but_1_is_refused(value: str) -> None:
    [finding] = judge_server("0.34.0", launch_with(**{RUNNER: value}), DRAFTER, TARGET)
    assert (finding.severity, finding.field, finding.actual) == (
        Severity.ERROR,
        f"server.env.{RUNNER}",
        value,
    )
    assert "vllm/platforms/interface.py:1481 in 0.34.0" in finding.message
    assert finding.message.endswith("unset it")


def test_before_0_34_the_variable_is_an_integer_and_0_refuses_a_mixed_drafter() -> None:
    [word] = judge_server("0.27.1", launch_with(**{RUNNER: "true"}), DRAFTER, TARGET)
    assert word.field == f"server.env.{RUNNER}" and "bool(int(value))" in word.message
    [off] = judge_server("0.28.0", launch_with(**{RUNNER: "0"}), DRAFTER, TARGET)
    assert off.field == f"server.env.{RUNNER}" and "forces V1" in off.message
    assert "require the V2 model runner" in off.message
    assert "qwen3_dflash.py:148 in 0.28.0" in off.message
    assert judge_server("0.29.0", launch_with(**{RUNNER: "2"}), DRAFTER, TARGET) == []
    full = {**DRAFTER, "layer_types": ["full_attention"] * 5}
    assert judge_server("0.29.0", launch_with(**{RUNNER: "0"}), full, TARGET) == []


def test_old_versions_name_the_version_and_the_upgrade() -> None:
    [window, head] = errors(judge_server("0.24.0", PLAYBOOK_LAUNCH, DRAFTER, TARGET))
    assert window.message.startswith("vLLM 0.24.0 runs this drafter's sliding layers as full")
    assert "never reads layer_types" in window.message
    assert "2048-token window" in window.message
    assert window.message.endswith("upgrade to >= 0.26.0")
    assert "Qwen3_5ForConditionalGeneration" in head.message
    assert "dflash/utils.py:60 in 0.24.0" in head.message
    assert head.message.endswith("upgrade to >= 0.26.0")
    [refused, _] = errors(judge_server("0.25.1", PLAYBOOK_LAUNCH, DRAFTER, TARGET))
    assert "does not yet support mixed sliding/full attention" in refused.message


def test_the_window_named_is_the_one_the_server_sees() -> None:
    overridden = {**DRAFTER, "dflash_config": {**DRAFTER["dflash_config"], "swa_window_size": 512}}
    [window] = errors(judge_server("0.20.0", PLAYBOOK_LAUNCH, overridden, TARGET))
    assert "512-token window" in window.message


def test_a_version_without_the_method_names_the_release_that_serves_the_drafter() -> None:
    [finding] = judge_server("0.19.1", PLAYBOOK_LAUNCH, DRAFTER, TARGET)
    assert finding.severity == Severity.ERROR
    assert "vLLM 0.19.1 has no speculative method 'dflash'" in finding.message
    assert "first in 0.20.0" in finding.message
    # 0.20 - 0.25 would not serve this mixed drafter and Qwen3.6 target as trained.
    assert finding.message.endswith("upgrade to >= 0.26.0")
    full = {**DRAFTER, "layer_types": ["full_attention"] * 5}
    causal = {"architectures": ["Qwen3ForCausalLM"]}
    [plain] = judge_server("0.11.0", PLAYBOOK_LAUNCH, full, causal)
    assert plain.message.endswith("upgrade to >= 0.20.0")


def test_the_attention_backend_is_judged_where_it_reaches_the_drafter() -> None:
    target_only = Launch({}, "flash_attn", "dflash", {"method": "dflash"})
    [finding] = judge_server("0.34.0", target_only, DRAFTER, TARGET)
    assert (finding.severity, finding.field) == (Severity.WARNING, "server.attention_backend")
    assert "dflash/utils.py:32 in 0.34.0" in finding.message
    assert "speculative_config.attention_backend" in finding.message
    pinned = Launch({}, "flash_attn", "dflash", {"attention_backend": "FLASH_ATTN"})
    assert judge_server("0.34.0", pinned, DRAFTER, TARGET) == []
    assert judge_server("0.20.0", target_only, {}, {}) == []  # the target's reaches it there
    [unread] = judge_server("0.34.0", launch_with(VLLM_ATTENTION_BACKEND="FLASH_ATTN"), {}, {})
    assert unread.severity == Severity.WARNING and "never reads" in unread.message


def test_unknown_and_newer_versions_are_warnings_that_say_what_was_assumed() -> None:
    [unread] = judge_server(None, PLAYBOOK_LAUNCH, DRAFTER, TARGET, unreadable="exit 127")
    assert unread.severity == Severity.WARNING and "exit 127" in unread.message
    [garbage] = judge_server("nightly", PLAYBOOK_LAUNCH, DRAFTER, TARGET)
    assert garbage.severity == Severity.WARNING and "'nightly' is not a version" in garbage.message
    [newer] = judge_server("0.35.0", PLAYBOOK_LAUNCH, DRAFTER, TARGET)
    assert newer.severity == Severity.WARNING
    assert "vLLM 0.35.0 is newer than the capability table" in newer.message
    assert "assumed it behaves like" in newer.message


@pytest.mark.parametrize("drafter", [{}, {"layer_types": "sliding"}, {"dflash_config": 3}, None])
def test_odd_configs_are_judged_as_configs_without_sliding_layers(drafter: dict | None) -> None:
    """Where the method is missing, that alone is said; where layer types are judged, an
    odd config has no sliding layer to judge."""
    [missing] = judge_server("0.19.1", PLAYBOOK_LAUNCH, drafter, {"architectures": "x"})
    assert (missing.severity, missing.field, missing.expected) == (
        Severity.ERROR,
        "server.version",
        ">= 0.20.0",  # the method's first release: no mixed drafter to wait for 0.26.0
    )
    assert judge_server("0.24.0", PLAYBOOK_LAUNCH, drafter, {"architectures": "x"}) == []
    assert judge_server("0.24.0", PLAYBOOK_LAUNCH, drafter, None) == []


@pytest.mark.parametrize(
    ("version", "per_request"),
    [
        ("0.27.1", False),  # no per_request_spec_decode_metrics in config/observability.py
        ("0.28.0", False),  # nor here
        ("0.29.0", True),  # vllm/config/observability.py:48, engine/arg_utils.py:1540
        ("0.32.0", True),  # :50, arg_utils.py:1657
        ("0.34.0", True),  # :52, arg_utils.py:1713
        (None, True),  # not read: the gate falls back on the responses
        ("not-a-version", True),
    ],
)
def test_auto_takes_per_request_figures_where_the_release_has_the_flag(
    version: str | None, per_request: bool
) -> None:
    """Checked in the wheels of 0.27.1, 0.28.0, 0.29.0, 0.32.0 and 0.34.0."""
    choice = auto_source(version)
    assert choice.per_request is per_request
    assert choice.why.startswith("gate.acceptance_source: auto")
    if not per_request:
        assert choice.why == (
            f"gate.acceptance_source: auto: vLLM {version} has no "
            "--per-request-spec-decode-metrics (vllm/config/observability.py (no such setting) in "
            f"{version[:4]}.0; first in 0.29.0), so the launch goes without it and the gate "
            "reads /metrics counter deltas; /metrics counters count every request the server "
            "handles: other clients' drafts enter the figures"
        )


def test_per_request_figures_need_the_flag_from_0_29() -> None:
    flagged = Launch(
        {}, None, "dflash", argv=("serve", "/m", "--per-request-spec-decode-metrics", "summary")
    )
    for version in ("0.29.0", "0.32.0", "0.34.0"):
        assert judge_server(version, flagged, DRAFTER, TARGET, server_checked=True) == []
    [finding] = judge_server("0.28.0", flagged, DRAFTER, TARGET)
    assert (finding.severity, finding.field) == (Severity.ERROR, "gate.acceptance_source")
    assert (finding.expected, finding.actual) == (">= 0.29.0", "0.28.0")
    assert finding.message == (
        "vLLM 0.28.0 has no --per-request-spec-decode-metrics (vllm/config/observability.py "
        "(no such setting) in 0.28.0; first in 0.29.0): the server refuses the launch; set "
        "gate.acceptance_source: auto or counters (the launch then goes without it and the "
        "gate reads /metrics counter deltas), or upgrade to >= 0.29.0"
    )


# --- the facts corrected from the wheels (each test names the release and file:line) ------


def test_0_19_1_reads_the_runner_variable_as_an_integer() -> None:
    """0.19.1 vllm/envs.py:1605-1606 reads VLLM_USE_V2_MODEL_RUNNER with
    `bool(int(os.getenv(..., "0")))` (0.20.0 :1675-1676, 0.21.0 :1711-1712): a word is a
    ValueError at start there too, not only from 0.22.0."""
    for version, line in (("0.19.1", 1605), ("0.20.0", 1675), ("0.21.0", 1711)):
        [word] = judge_server(version, Launch({RUNNER: "true"}, None, None), {}, {})
        assert word.field == f"server.env.{RUNNER}" and "bool(int(value))" in word.message
        assert f"vllm/envs.py:{line} in {version}" in word.message
        assert judge_server(version, Launch({RUNNER: "1"}, None, None), {}, {}) == []


DRAFT_MODEL = Launch({RUNNER: "1"}, None, "draft_model")
NGRAM = Launch({RUNNER: "1"}, None, "ngram")


@pytest.mark.parametrize("version", ["0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0"])
def test_forcing_v2_refuses_draft_model_0_26_to_0_30(version: str) -> None:
    """0.26.0 vllm/config/vllm.py:1456-1457 validates the V2 runner when the variable
    forces it, :2156-2165 names every method but eagle, eagle3, mtp, dflash and dspark,
    :2216-2225 raises (0.30.0 :2839-2850 lists draft_model; gone from 0.31.0 :3074-3083)."""
    [refused] = judge_server(version, DRAFT_MODEL, {}, {})
    assert (refused.severity, refused.field) == (Severity.ERROR, f"server.env.{RUNNER}")
    assert (
        "ValueError: Model Runner V2 does not yet support: speculative method 'draft_model'"
        in refused.message
    )
    assert "vllm/config/vllm.py:" in refused.message and refused.message.endswith(
        "(vLLM then runs this method on the V1 runner)"
    )
    assert judge_server(version, Launch({RUNNER: "0"}, None, "draft_model"), {}, {}) == []
    assert judge_server(version, Launch({}, None, "draft_model"), {}, {}) == []


def test_forcing_v2_with_draft_model_is_served_from_0_31() -> None:
    """0.31.0 vllm/config/vllm.py:3074-3083 no longer names draft_model."""
    for version in ("0.31.0", "0.32.0", "0.33.0"):
        assert judge_server(version, DRAFT_MODEL, {}, {}) == [], version


def test_forcing_v2_refuses_draft_model_from_0_20_too() -> None:
    """0.21.0 vllm/config/vllm.py:1867-1869 (0.20.0 :1799-1801): V2 serves only eagle,
    eagle3 and mtp; the raise at :1892-1896 has the variable's name in its words."""
    [refused] = judge_server("0.21.0", DRAFT_MODEL, {}, {})
    assert (
        "ValueError: VLLM_USE_V2_MODEL_RUNNER does not yet support: speculative method "
        "'draft_model'" in refused.message
    )
    assert judge_server("0.19.1", DRAFT_MODEL, {}, {}) == []  # nothing validates V2 there


@pytest.mark.parametrize(
    ("version", "words"),
    [
        ("0.26.0", "ngram/ngram_gpu speculative decoding"),  # 0.26.0 config/vllm.py:2156-2157
        ("0.29.0", "ngram/ngram_gpu speculative decoding"),  # 0.29.0 :2564-2565
        ("0.30.0", "speculative method 'ngram'"),  # 0.30.0 :2839-2850
        ("0.31.0", "speculative method 'ngram'"),  # 0.31.0 :3074-3083
    ],
)
def test_forcing_v2_refuses_ngram_0_26_to_0_31(version: str, words: str) -> None:
    """0.26.0 - 0.31.0 vllm/config/vllm.py `_get_v2_model_runner_unsupported_features`
    names ngram; 0.32.0 :2928-2934 no longer does."""
    [refused] = judge_server(version, NGRAM, {}, {})
    assert f"ValueError: Model Runner V2 does not yet support: {words}" in refused.message
    assert judge_server("0.32.0", NGRAM, {}, {}) == []


def test_mtp_aliases_are_served_by_v2_when_forced() -> None:
    """0.26.0 vllm/config/speculative.py:686-690 sets every `*_mtp` method to mtp, which
    V2 serves (vllm/config/vllm.py:2158-2164)."""
    assert judge_server("0.26.0", Launch({RUNNER: "1"}, None, "qwen3_5_mtp"), {}, {}) == []


@pytest.mark.parametrize("version", ["0.29.0", "0.30.0", "0.32.0", "0.33.0"])
def test_0_29_to_0_33_the_variable_at_0_meets_the_v1_validators_value_error(
    version: str,
) -> None:
    """0.29.0 vllm/config/vllm.py:1653-1656 validates the V1 runner, :2629-2630 names the
    mixed drafter, :2735-2740 raises ValueError before the model loads (0.33.0 :3131,
    :3336): the first error is not qwen3_dflash.py's NotImplementedError."""
    [off] = judge_server(version, launch_with(**{RUNNER: "0"}), DRAFTER, TARGET)
    assert off.field == f"server.env.{RUNNER}" and "forces V1" in off.message
    assert (
        "'ValueError: Model Runner V1 does not support: mixed sliding/full dflash drafts'"
        in off.message
    )
    assert "NotImplementedError" not in off.message


def test_0_29_to_0_33_unset_warns_of_the_v1_fallback_the_host_may_take() -> None:
    """0.29.0 vllm/config/vllm.py:645-677: unset, V2 unless Triton is missing (:662-666)
    or V2 lacks a feature (:668-675); the V1 runner then refuses the mixed drafter with
    the ValueError of :2735-2740. Left to the host's own check when it ran."""
    for version in ("0.29.0", "0.33.0"):
        [fallback] = judge_server(version, PLAYBOOK_LAUNCH, DRAFTER, TARGET)
        assert (fallback.severity, fallback.field) == (Severity.WARNING, "server.version")
        assert "falls back to V1 where V2 cannot run (no Triton" in fallback.message
        assert "Model Runner V1 does not support: mixed sliding/full dflash drafts" in (
            fallback.message
        )
    full = {**DRAFTER, "layer_types": ["full_attention"] * 5}
    assert judge_server("0.29.0", PLAYBOOK_LAUNCH, full, TARGET) == []


@pytest.mark.parametrize(("version", "line"), [("0.21.0", 1110), ("0.24.0", 1212)])
def test_0_21_to_0_24_the_drafter_takes_the_speculative_configs_backend(
    version: str, line: int
) -> None:
    """0.21.0 vllm/v1/spec_decode/llm_base_proposer.py:1103-1110: the draft config never
    inherits the target's attention backend (0.24.0 :1212); only 0.20.x does."""
    target_only = Launch({}, "flash_attn", "dflash", {"method": "dflash"})
    [finding] = judge_server(version, target_only, {}, {})
    assert (finding.severity, finding.field) == (Severity.WARNING, "server.attention_backend")
    assert f"vllm/v1/spec_decode/llm_base_proposer.py:{line} in {version}" in finding.message


def test_temperature_above_2_is_refused_from_0_24() -> None:
    """0.24.0 vllm/sampling_params.py:529-533 (0.34.0 :672-676) refuse a temperature
    above 2; 0.23.0 has no upper bound."""
    assert capabilities_for("0.24.0").row.request_temperature_max == 2.0
    assert capabilities_for("0.34.0").row.request_temperature_max == 2.0
    assert capabilities_for("0.23.0").row.request_temperature_max is None
