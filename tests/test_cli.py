"""The CLI as a user runs it: exit codes, JSON documents, messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.drafters.profiles import get_profile

ROOT = Path(__file__).resolve().parent.parent
DRAFTERS = Path(__file__).parent / "fixtures" / "drafters"
EXAMPLE = ROOT / "inventories" / "example.yaml"


def orch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            "NO_COLOR": "1",
            "COLUMNS": "200",
            "PATH": "/usr/bin:/bin",
            "XDG_CONFIG_HOME": "/nonexistent",
        },
        timeout=60,
    )


def test_help_lists_every_command_and_the_exit_codes() -> None:
    done = orch("--help")
    assert done.returncode == 0
    for command in (
        "deploy",
        "rollback",
        "verify-config",
        "status",
        "history",
        "lab",
        "render",
        "profiles",
        "unlock",
    ):
        assert command in done.stdout
    assert "2 bad input" in done.stdout


PUBLISHED_DRAFTER = DRAFTERS / "z-lab_Qwen3.6-27B-DFlash.config.json"
REFERENCE_TARGET = DRAFTERS / "Qwen3.6-27B.config.json"
QWEN36 = "z-lab/Qwen3.6-27B-DFlash"


def verify(drafter: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return orch(
        "verify-config", "--drafter", str(drafter), "--target", str(REFERENCE_TARGET), *extra
    )


def variant(tmp_path: Path, **changes: object) -> Path:
    """The config orch renders for the drafter (its profile's) with some fields changed;
    a dotted name such as dflash_config__mask_token_id changes a nested field."""
    config = get_profile(QWEN36).config
    for name, value in changes.items():
        *parents, leaf = name.split("__")
        node = config
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_verify_config_offline_passes_the_rendered_config(tmp_path: Path) -> None:
    done = verify(variant(tmp_path), "--json")
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout) == {"ok": True, "findings": []}


def test_verify_config_offline_stops_the_published_file_the_server_sees_no_window_in() -> None:
    done = verify(PUBLISHED_DRAFTER, "--json")
    assert done.returncode == 1
    [finding] = json.loads(done.stdout)["findings"]
    assert (finding["severity"], finding["field"]) == ("error", "use_sliding_window")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("eagle_aux_hidden_state_layer_ids", [2, 17, 32, 47, 62]),
        ("dflash_config__swa_window_size", 4096),
        ("dflash_config__use_swa", True),
        ("dflash_config__causal", True),
        ("is_causal", True),
        ("is_neox_style", False),
        ("dflash_config__use_aux_hidden_state", False),
        ("attention_bias", True),
        ("dflash_config__attention_sink_bias", True),
        ("rope_parameters", {"rope_type": "default", "rope_theta": 1000000}),
        ("target_hidden_size", 4096),
        ("draft_vocab_size", 32000),
        ("dflash_config__layer_ids", [1, 2, 3, 4, 5]),
        ("mask_token_id", 248064),
    ],
)
def test_verify_config_stops_an_override_of_a_key_vllm_reads(
    tmp_path: Path, key: str, value: object
) -> None:
    done = verify(variant(tmp_path, **{key: value}), "--json")
    assert done.returncode == 1, done.stdout
    errors = {f["field"] for f in json.loads(done.stdout)["findings"] if f["severity"] == "error"}
    assert key.replace("__", ".") in errors


def test_verify_config_passes_bos_248044_with_a_warning_naming_it(tmp_path: Path) -> None:
    done = verify(variant(tmp_path, bos_token_id=248044))
    assert done.returncode == 0, done.stdout
    assert "bos_token_id" in done.stdout
    assert "no server reads it" in done.stdout.replace("\n", " ")
    assert done.stdout.splitlines()[-1] == "0 error(s), 1 warning(s)"


def test_verify_config_names_a_misspelt_key_and_the_one_meant(tmp_path: Path) -> None:
    done = verify(variant(tmp_path, dflash_config__target_layer_idz=[1, 17, 33, 49, 63]), "--json")
    assert done.returncode == 1
    [finding] = json.loads(done.stdout)["findings"]
    assert finding["field"] == "dflash_config.target_layer_idz"
    assert "did you mean dflash_config.target_layer_ids?" in finding["message"]


def test_verify_config_offline_reports_the_field_guess(tmp_path: Path) -> None:
    guessed = variant(
        tmp_path,
        bos_token_id=248044,
        dflash_config={"mask_token_id": 248070, "target_layer_ids": [1, 17, 33, 49, 63]},
    )
    done = verify(guessed, "--profile", "z-lab/Qwen3.6-27B-DFlash", "--json")
    assert done.returncode == 1
    document = json.loads(done.stdout)
    by_severity = {
        severity: {f["field"] for f in document["findings"] if f["severity"] == severity}
        for severity in ("error", "warning")
    }
    assert by_severity == {
        "error": {"dflash_config.target_layer_ids"},
        "warning": {"bos_token_id"},
    }
    assert document["ok"] is False


def test_verify_config_human_output_names_the_field_and_counts(tmp_path: Path) -> None:
    done = verify(variant(tmp_path, layer_types=["full_attention"] * 5))
    assert done.returncode == 1
    assert "layer_types" in done.stdout
    assert done.stdout.splitlines()[-1].startswith("1 error(s)")


def test_truncated_config_is_a_finding_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(PUBLISHED_DRAFTER.read_bytes()[:200])
    done = verify(tmp_path / "config.json", "--json")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "not valid JSON" in json.loads(done.stdout)["findings"][0]["message"]


def test_unusable_input_exits_2(tmp_path: Path) -> None:
    done = orch(
        "verify-config", "--drafter", str(tmp_path / "nope"), "--target", str(tmp_path / "nope")
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ")


def test_bad_inventory_exits_2_with_file_line_and_field() -> None:
    bad = Path(__file__).parent / "fixtures" / "inventories" / "bad-vmid.yaml"
    done = orch("render", "qwen-dflash", "-i", str(bad))
    assert done.returncode == 2
    assert f"{bad}:14:5: containers.ct201.vmid: 42 is not a valid Proxmox VMID" in done.stderr


def test_render_prints_config_and_launch_script_per_target() -> None:
    done = orch("render", "qwen-dflash", "-i", str(EXAMPLE), "--limit", "ct200")
    assert done.returncode == 0, done.stderr
    assert '"target_layer_ids"' in done.stdout
    assert "--speculative-config" in done.stdout
    assert "/dev/shm/models/Qwen3.6-27B" in done.stdout
    assert "ct129" not in done.stdout


def test_render_with_a_guess_shows_the_finding_and_exits_1() -> None:
    done = orch(
        "render",
        "qwen-dflash",
        "-i",
        str(EXAMPLE),
        "--limit",
        "ct200",
        "--set",
        "drafter.overrides.dflash_config.mask_token_id=248064",
    )
    assert done.returncode == 1
    assert "dflash_config.mask_token_id" in done.stdout


def test_unknown_set_path_exits_2() -> None:
    done = orch("render", "qwen-dflash", "-i", str(EXAMPLE), "--set", "server.prot=1")
    assert done.returncode == 2
    assert "unknown field 'server.prot'" in done.stderr


def test_profiles_lists_the_published_drafters() -> None:
    done = orch("profiles")
    assert done.returncode == 0
    assert "z-lab/Qwen3.6-27B-DFlash" in done.stdout
    assert "z-lab/Qwen3-8B-DFlash-b16" in done.stdout


def test_diff_without_dry_run_is_a_usage_error() -> None:
    done = orch("deploy", "qwen-dflash", "-i", str(EXAMPLE), "--diff")
    assert done.returncode == 2
    assert "--diff shows what --dry-run would change" in done.stderr
