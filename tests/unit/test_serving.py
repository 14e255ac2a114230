"""The vLLM capability table, its loader and the judge of a launch against a version."""

from __future__ import annotations

import contextlib
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
from orchestrator.serving.capabilities import (
    FULL_ATTENTION,
    REFUSED,
    V2_RUNNER,
    UnknownVersion,
    capabilities_for,
    first_release_where,
    load_table,
    newest_version,
)
from orchestrator.serving.judge import Launch, judge_server, read_launch, runner_enabled

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = Path(__file__).parent.parent / "fixtures" / "drafters"
DRAFTER = get_profile("z-lab/Qwen3.6-27B-DFlash").config
TARGET = json.loads(target_files("z-lab/Qwen3.6-27B-DFlash")["config.json"])
PLAYBOOK_LAUNCH = Launch({"VLLM_USE_V2_MODEL_RUNNER": "1"}, "flash_attn", "dflash")
BARE_LAUNCH = Launch({}, "flash_attn", "dflash")


# --- the table -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "mixed", "lm_head_bug", "dflash"),
    [
        ("0.11.0", None, False, False),
        ("0.19.1", None, False, False),
        ("0.20.0", FULL_ATTENTION, True, True),
        ("0.24.0", FULL_ATTENTION, True, True),
        ("0.25.0", REFUSED, True, True),
        ("0.25.1", REFUSED, True, True),
        ("0.26.0", V2_RUNNER, False, True),
        ("0.26.0rc1", V2_RUNNER, False, True),  # judged by its release
        ("v0.27.1+cu129", V2_RUNNER, False, True),
    ],
)
def test_rows_by_version(version: str, mixed: str | None, lm_head_bug: bool, dflash: bool) -> None:
    found = capabilities_for(version)
    assert not found.assumed
    assert found.row.mixed_attention_drafters == mixed
    assert found.row.lm_head_zero_for_conditional_generation is lm_head_bug
    assert found.row.serves("dflash") is dflash
    assert found.row.sources  # every row cites where its facts come from


def test_every_method_has_a_column_and_rows_do_not_overlap() -> None:
    table = load_table()
    for row in table.rows:
        assert set(row.methods) == {"dflash", "eagle3", "mtp", "draft_model", "ngram"}
    probes = [f"0.{minor}.{patch}" for minor in range(10, 30) for patch in range(3)]
    for probe in probes:
        covering = [row for row in table.rows if row.range.contains(probe)]
        assert len(covering) <= 1, probe


def test_a_newer_release_is_judged_as_the_newest_row_and_marked_assumed() -> None:
    found = capabilities_for("0.31.2")
    assert found.assumed
    assert found.row == load_table().rows[-1]
    assert newest_version() == "0.27.1"
    assert not capabilities_for(newest_version()).assumed


def test_upgrade_targets_come_from_the_rows() -> None:
    after = capabilities_for("0.21.1").version
    assert first_release_where(lambda r: r.mixed_attention_drafters == V2_RUNNER, after) == "0.26.0"
    assert first_release_where(lambda r: r.serves("dflash"), capabilities_for("0.9").version) == (
        "0.20.0"
    )
    assert first_release_where(lambda r: r.serves("dflash") is False, after) is None


@pytest.mark.parametrize("text", ["", "latest", "0.27.1 (git sha)", "\x00", "x" * 500])
def test_bad_version_strings_raise_unknown_version(text: str) -> None:
    with pytest.raises(UnknownVersion):
        capabilities_for(text)


@given(st.text(max_size=40))
def test_no_version_string_is_a_traceback(text: str) -> None:
    with contextlib.suppress(UnknownVersion):
        capabilities_for(text)


ROW = """\
  - range: ">=0.1"
    methods: {dflash: true}
    mixed_attention_drafters: null
    lm_head_zero_for_conditional_generation: false
    health_503_while_warming: false
    sources: [here]
"""


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("rows: []\nnewest_release: '1'\n", ":1:1: rows", "has no rows"),
        (f"rows:\n{ROW}", ":1:1: newest_release", "required field is missing"),
        (
            f"newest_release: '1.0'\nrows:\n{ROW.replace('    sources: [here]', '')}",
            ":3:5: rows.0.sources",
            "required field is missing",
        ),
        (
            f"newest_release: '1.0'\nrows:\n{ROW.replace('>=0.1', 'at least one')}",
            ":3:5: rows.0.range",
            "not a version specifier",
        ),
        (
            f"newest_release: '1.0'\nrows:\n{ROW.replace('dflash: true', 'dflsh: true')}",
            ":4:15: rows.0.methods.dflsh",
            "expected one of",
        ),
        (
            f"newest_release: '1.0'\nrows:\n{ROW.replace('null', 'v2_runner')}",
            ":3:5: rows.0.runner_env",
            "needs the variable",
        ),
        (
            f"newest_release: '1.0'\nrows:\n{ROW}    colour: red\n",
            ":9:5: rows.0.colour",
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


@pytest.mark.parametrize(
    ("value", "enabled"), [("1", True), ("0", False), (None, False), ("true", False), ("2", True)]
)
def test_the_runner_variable_is_read_as_vllm_reads_booleans(value: str, enabled: bool) -> None:
    assert runner_enabled(value) is enabled


# --- the judge ---------------------------------------------------------------------------------


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == Severity.ERROR]


def test_the_playbook_launch_on_the_newest_version_has_no_findings() -> None:
    assert judge_server(newest_version(), PLAYBOOK_LAUNCH, DRAFTER, TARGET) == []


def test_without_the_runner_variable_the_fix_is_named() -> None:
    [finding] = judge_server("0.27.1", BARE_LAUNCH, DRAFTER, TARGET)
    assert finding.severity == Severity.ERROR
    assert finding.field == "server.env.VLLM_USE_V2_MODEL_RUNNER"
    assert finding.message.endswith('set server.env VLLM_USE_V2_MODEL_RUNNER: "1"')
    assert "require the V2 model runner" in finding.message
    off = Launch({"VLLM_USE_V2_MODEL_RUNNER": "0"}, "flash_attn", "dflash")
    assert errors(judge_server("0.26.0", off, DRAFTER, TARGET))[0].actual == "0"


def test_a_drafter_without_sliding_layers_needs_no_runner() -> None:
    full = {**DRAFTER, "layer_types": ["full_attention"] * 5}
    assert judge_server("0.27.1", BARE_LAUNCH, full, TARGET) == []
    assert judge_server("0.25.1", BARE_LAUNCH, full, {"architectures": ["Qwen3ForCausalLM"]}) == []


def test_old_versions_name_the_version_and_the_upgrade() -> None:
    [window, head] = errors(judge_server("0.24.0", PLAYBOOK_LAUNCH, DRAFTER, TARGET))
    assert window.message.startswith("vLLM 0.24.0 runs this drafter's sliding layers as full")
    assert "2048-token window" in window.message
    assert "upgrade to >= 0.26.0" in window.message
    assert "Qwen3_5ForConditionalGeneration" in head.message
    assert head.message.endswith("upgrade to >= 0.26.0")
    [refused, _] = errors(judge_server("0.25.1", PLAYBOOK_LAUNCH, DRAFTER, TARGET))
    assert "does not yet support mixed sliding/full attention" in refused.message


def test_the_window_named_is_the_one_the_server_sees() -> None:
    overridden = {**DRAFTER, "dflash_config": {**DRAFTER["dflash_config"], "swa_window_size": 512}}
    [window, _] = errors(judge_server("0.20.0", PLAYBOOK_LAUNCH, overridden, TARGET))
    assert "512-token window" in window.message


def test_a_version_without_the_method_names_the_release_that_serves_the_drafter() -> None:
    [finding] = judge_server("0.19.1", PLAYBOOK_LAUNCH, DRAFTER, TARGET)
    assert finding.severity == Severity.ERROR
    assert "vLLM 0.19.1 has no speculative method 'dflash' (first in 0.20.0)" in finding.message
    # 0.20 - 0.25 would not serve this mixed drafter and Qwen3.6 target as trained.
    assert finding.message.endswith(
        'upgrade to >= 0.26.0 with server.env VLLM_USE_V2_MODEL_RUNNER: "1"'
    )
    full = {**DRAFTER, "layer_types": ["full_attention"] * 5}
    causal = {"architectures": ["Qwen3ForCausalLM"]}
    [plain] = judge_server("0.11.0", PLAYBOOK_LAUNCH, full, causal)
    assert plain.message.endswith("upgrade to >= 0.20.0")


def test_no_attention_backend_is_a_warning_naming_the_documented_one() -> None:
    unset = Launch({"VLLM_USE_V2_MODEL_RUNNER": "1"}, None, "dflash")
    [finding] = judge_server("0.27.1", unset, DRAFTER, TARGET)
    assert (finding.severity, finding.field, finding.expected) == (
        Severity.WARNING,
        "server.attention_backend",
        "flash_attn",
    )
    legacy = Launch({"VLLM_USE_V2_MODEL_RUNNER": "1", "VLLM_ATTENTION_BACKEND": "FLASH_ATTN"})
    assert judge_server("0.27.1", Launch(legacy.env, None, "dflash"), DRAFTER, TARGET) == []


def test_unknown_and_newer_versions_are_warnings_that_say_what_was_assumed() -> None:
    [unread] = judge_server(None, PLAYBOOK_LAUNCH, DRAFTER, TARGET, unreadable="exit 127")
    assert unread.severity == Severity.WARNING and "exit 127" in unread.message
    [garbage] = judge_server("nightly", PLAYBOOK_LAUNCH, DRAFTER, TARGET)
    assert garbage.severity == Severity.WARNING and "'nightly' is not a version" in garbage.message
    [newer] = judge_server("0.30.0", PLAYBOOK_LAUNCH, DRAFTER, TARGET)
    assert newer.severity == Severity.WARNING
    assert "vLLM 0.30.0 is newer than the capability table" in newer.message
    assert "assumed it behaves like" in newer.message


@pytest.mark.parametrize("drafter", [{}, {"layer_types": "sliding"}, {"dflash_config": 3}])
def test_odd_configs_are_judged_without_a_traceback(drafter: dict) -> None:
    judge_server("0.19.1", PLAYBOOK_LAUNCH, drafter, {"architectures": "x"})
    judge_server("0.19.1", PLAYBOOK_LAUNCH, None, None)


# --- verify-config --server-version ------------------------------------------------------------


@pytest.fixture
def rendered(tmp_path: Path) -> Path:
    """The drafter config as orch renders it (the profile's)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DRAFTER))
    return path
