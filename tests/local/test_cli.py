"""The CLI as a user runs it: exit codes, JSON documents, messages."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from orchrun import COMMAND, PLAIN, ROOT, RunResult
from orchrun import orch as run_orch

from orchestrator.drafters.profiles import get_profile

DRAFTERS = Path(__file__).parent.parent / "fixtures" / "drafters"
EXAMPLE = ROOT / "inventories" / "example.yaml"


def orch(*args: str, columns: int = 200) -> RunResult:
    return run_orch(
        *args, env={**PLAIN, "COLUMNS": str(columns), "XDG_CONFIG_HOME": "/nonexistent"}
    )


def test_help_lists_every_command_and_the_exit_codes() -> None:
    done = orch("--help")
    assert done.code == 0
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
        "logs",
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
    assert done.code == 0, str(done)
    assert json.loads(done.stdout) == {
        "kind": "Findings",
        "api_version": "orch/v1",
        "result": "ok",
        "judged_as": {"kind": "dflash", "format": None, "by": "recognised from the drafter config"},
        "findings": [],
    }


def test_verify_config_offline_stops_the_published_file_the_server_sees_no_window_in() -> None:
    done = verify(PUBLISHED_DRAFTER, "--json")
    assert done.code == 1
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
    assert done.code == 1, done.stdout
    errors = {f["field"] for f in json.loads(done.stdout)["findings"] if f["severity"] == "error"}
    assert key.replace("__", ".") in errors


def test_verify_config_passes_bos_248044_with_a_warning_naming_it(tmp_path: Path) -> None:
    done = verify(variant(tmp_path, bos_token_id=248044))
    assert done.code == 0, str(done)
    assert "bos_token_id" in done.stdout
    assert "no server reads it" in done.stdout.replace("\n", " ")
    assert done.stdout.splitlines()[-1] == "0 error(s), 1 warning(s)"


def test_verify_config_names_a_misspelt_key_and_the_one_meant(tmp_path: Path) -> None:
    done = verify(variant(tmp_path, dflash_config__target_layer_idz=[1, 17, 33, 49, 63]), "--json")
    assert done.code == 1
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
    assert done.code == 1
    document = json.loads(done.stdout)
    by_severity = {
        severity: {f["field"] for f in document["findings"] if f["severity"] == severity}
        for severity in ("error", "warning")
    }
    assert by_severity == {
        "error": {"dflash_config.target_layer_ids"},
        "warning": {"bos_token_id"},
    }
    assert document["result"] == "not_applied"


def test_verify_config_human_output_names_the_field_and_counts(tmp_path: Path) -> None:
    done = verify(variant(tmp_path, layer_types=["full_attention"] * 5))
    assert done.code == 1
    assert "layer_types" in done.stdout
    assert done.stdout.splitlines()[-1].startswith("1 error(s)")


def test_truncated_config_is_a_finding_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(PUBLISHED_DRAFTER.read_bytes()[:200])
    done = verify(tmp_path / "config.json", "--json")
    assert done.code == 1
    assert "Traceback" not in done.stderr
    assert "not valid JSON" in json.loads(done.stdout)["findings"][0]["message"]


def test_unusable_input_exits_2(tmp_path: Path) -> None:
    done = orch(
        "verify-config", "--drafter", str(tmp_path / "nope"), "--target", str(tmp_path / "nope")
    )
    assert done.code == 2
    assert done.stderr.startswith("error: ")


def test_bad_inventory_exits_2_with_file_line_and_field() -> None:
    bad = Path(__file__).parent.parent / "fixtures" / "inventories" / "bad-vmid.yaml"
    done = orch("render", "qwen-dflash", "-i", str(bad))
    assert done.code == 2
    assert f"{bad}:14:5: containers.ct201.vmid: 42 is not a valid Proxmox VMID" in done.stderr


def test_render_prints_config_and_launch_script_per_target() -> None:
    done = orch("render", "qwen-dflash", "-i", str(EXAMPLE), "--limit", "ct200")
    assert done.code == 0, str(done)
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
    assert done.code == 1
    assert "dflash_config.mask_token_id" in done.stdout


def test_unknown_set_path_exits_2() -> None:
    done = orch("render", "qwen-dflash", "-i", str(EXAMPLE), "--set", "server.prot=1")
    assert done.code == 2
    assert "unknown field 'server.prot'" in done.stderr


def test_profiles_lists_the_published_drafters() -> None:
    done = orch("profiles")
    assert done.code == 0
    assert "z-lab/Qwen3.6-27B-DFlash" in done.stdout
    assert "z-lab/Qwen3-8B-DFlash-b16" in done.stdout


def test_render_prints_whole_lines_at_any_width() -> None:
    wide = orch("render", "qwen-dflash", "-i", str(EXAMPLE), "--limit", "ct200")
    narrow = orch("render", "qwen-dflash", "-i", str(EXAMPLE), "--limit", "ct200", columns=40)
    assert narrow.code == wide.code == 0, narrow.stderr
    assert narrow.stdout == wide.stdout
    [spec] = [line for line in narrow.stdout.splitlines() if "--speculative-config" in line]
    assert spec.endswith('"num_speculative_tokens": 15}\' \\')


def test_render_output_writes_each_containers_files(tmp_path: Path) -> None:
    done = orch("render", "qwen-dflash", "-i", str(EXAMPLE), "--output", str(tmp_path / "out"))
    assert done.code == 0, str(done)
    for name in ("ct129", "ct200"):
        script, config = (
            tmp_path / "out" / name / "serve.sh",
            tmp_path / "out" / name / "config.json",
        )
        assert f"wrote {script}" in done.stdout
        assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0
        assert script.stat().st_mode & 0o777 == 0o755
        assert config.stat().st_mode & 0o777 == 0o644
        assert json.loads(config.read_text())["architectures"] == ["DFlashDraftModel"]
    (tmp_path / "file").write_text("")
    refused = orch("render", "qwen-dflash", "-i", str(EXAMPLE), "--output", str(tmp_path / "file"))
    assert refused.code == 2
    assert "Traceback" not in refused.stderr and str(tmp_path / "file") in refused.stderr


# --- hostile inputs: each is bad input (exit 2) with its place, never a traceback ---------------


def render(*args: str) -> subprocess.CompletedProcess[str]:
    done = orch("render", "qwen-dflash", *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_template_payload_in_set_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = f'{{{{ cycler.__init__.__globals__.os.system("touch {marker}") }}}}'
    done = render("-i", str(EXAMPLE), "--set", f"target.path={json.dumps(payload)}")
    assert done.code == 2
    assert "target.path for ct129: not allowed in a template" in done.stderr
    assert not marker.exists()


def test_template_payload_in_a_playbook_file_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    playbook = (ROOT / "playbooks" / "qwen-dflash.yaml").read_text()
    hostile = playbook.replace(
        "{{ vars.models_dir }}",
        f"{{{{ self.__init__.__globals__.os.system('touch {marker}') }}}}",
        1,
    )
    assert hostile != playbook
    (tmp_path / "p.yaml").write_text(hostile)
    done = orch("render", str(tmp_path / "p.yaml"), "-i", str(EXAMPLE))
    assert done.code == 2, done.stderr
    assert "not allowed in a template" in done.stderr
    assert not marker.exists()


def billion_laughs() -> str:
    lines = ["hosts: {pve: {address: 127.0.0.1}}", "l0: &l0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, 10)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (billion_laughs(), r":2:\d+: aliases expand to more than 100000 values"),
        ("hosts: &h {pve: *h}\n", r":1:8: an alias refers to itself"),
        ("containers: " + "[" * 50_000 + "]" * 50_000 + "\n", r":1: nested deeper than 64 levels"),
    ],
    ids=["billion-laughs", "self-reference", "deep-nesting"],
)
def test_hostile_yaml_inventory_exits_2_with_its_line(
    tmp_path: Path, text: str, message: str
) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(text)
    done = render("-i", str(inventory))
    assert done.code == 2
    assert re.fullmatch(f"error: {re.escape(str(inventory))}{message}\n", done.stderr)


def test_devices_fifos_and_directories_are_not_inventories(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in (
        ("/dev/zero", "a character device"),
        (str(fifo), "a FIFO"),
        (str(tmp_path), "a directory"),
    ):
        done = render("-i", path)
        assert done.code == 2
        assert done.stderr == f"error: {path}:1: not a regular file ({kind})\n"


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("server.stop_timeout=.inf", "Input should be a finite number (got inf)"),
        ("server.stop_timeout=.nan", "Input should be a finite number (got nan)"),
        ("server.stop_timeout=-5", "Input should be greater than 0 (got -5)"),
        ("server.stop_timeout=1.0e+300", "Input should be less than or equal to 604800"),
    ],
)
def test_numbers_out_of_range_exit_2(assignment: str, message: str) -> None:
    done = render("-i", str(EXAMPLE), "--set", assignment)
    assert done.code == 2
    assert done.stderr.startswith(
        f"error: --set server.stop_timeout: server.stop_timeout: {message}"
    )


def test_a_wrongly_typed_var_is_a_schema_error(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        EXAMPLE.read_text().replace("nvidia_smi: /usr/bin/nvidia-smi", "nvidia_smi: 42")
    )
    done = render("-i", str(inventory))
    assert done.code == 2
    assert re.fullmatch(
        rf"error: {re.escape(str(inventory))}:\d+:\d+: defaults.vars.nvidia_smi: "
        r"Input should be a valid string \(got 42\)\n",
        done.stderr,
    )


def test_lab_decode_speed_must_be_positive(tmp_path: Path) -> None:
    done = orch("lab", "up", "--dir", str(tmp_path / "lab"), "--tokens-per-second", "0")
    assert done.code == 2
    assert "'--tokens-per-second': 0.0 is not in the range x>0" in done.stderr
    assert not (tmp_path / "lab").exists()


def test_probe_endpoints_are_checked_with_their_field() -> None:
    done = orch("render", "qwen-dflash", "-i", str(EXAMPLE), "--set", "gate.probe.endpoints=[grpc]")
    assert done.code == 2
    assert "gate.probe.endpoints" in done.stderr and "Traceback" not in done.stderr


def test_history_show_of_an_unknown_or_malformed_run_exits_2(tmp_path: Path) -> None:
    for run_id, message in (("2026", "no run log for '2026'"), ("../x", "is not a run id")):
        done = run_orch(
            "history",
            "--show",
            run_id,
            env={"PATH": "/usr/bin:/bin", "ORCH_STATE_DIR": str(tmp_path)},
        )
        assert done.code == 2 and message in done.stderr
        assert "Traceback" not in done.stderr


def test_logs_cannot_follow_as_one_json_document() -> None:
    done = orch("logs", "qwen-dflash", "-i", str(EXAMPLE), "-f", "--json")
    assert done.code == 2 and "--follow" in done.stderr


def test_a_path_longer_than_path_max_is_bad_input_with_its_field(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    long_dir = "/" + "s" * 100_000
    inventory.write_text(
        EXAMPLE.read_text().replace("state_dir: /var/lib/orch", f"state_dir: {long_dir}")
    )
    assert long_dir in inventory.read_text()
    done = render("-i", str(inventory))
    assert done.code == 2
    assert "defaults.vars.state_dir: " in done.stderr
    assert "a path of 100001 bytes: at most 4095 (Linux PATH_MAX)" in done.stderr
    assert len(done.stderr) < 2000  # the value is not echoed back
    over = render("-i", str(EXAMPLE), "--set", f"state_dir={long_dir}")
    assert over.code == 2 and "state_dir for " in over.stderr and len(over.stderr) < 2000


# the kind verify-config judges by


@pytest.mark.parametrize("form", ["speculators", "plain"])
def test_verify_config_infers_eagle3_and_says_so(form: str) -> None:
    drafter = DRAFTERS / "eagle3" / f"{form}.config.json"
    target = DRAFTERS / "Qwen3-8B.config.json"
    done = orch("verify-config", "--drafter", str(drafter), "--target", str(target), "--json")
    document = json.loads(done.stdout)
    assert document["judged_as"] == {
        "kind": "eagle3",
        "format": form,
        "by": "recognised from the drafter config",
    }
    assert done.code == 0, document["findings"]
    text = orch("verify-config", "--drafter", str(drafter), "--target", str(target))
    assert text.stdout.startswith(f"judged as eagle3 ({form} format)")


def mtp_target(layers: int) -> dict:
    config = json.loads(REFERENCE_TARGET.read_text())
    config["text_config"]["mtp_num_hidden_layers"] = layers
    return config


def test_verify_config_judges_a_target_alone_or_as_its_own_drafter_as_mtp(
    tmp_path: Path,
) -> None:
    copied = tmp_path / "config.json"
    copied.write_text(json.dumps(mtp_target(1)))
    for drafter in ([], ["--drafter", str(REFERENCE_TARGET)], ["--drafter", str(copied)]):
        done = orch("verify-config", *drafter, "--target", str(REFERENCE_TARGET), "--json")
        document = json.loads(done.stdout)
        assert (done.code, document["judged_as"]["kind"]) == (0, "mtp"), done.stdout
    warned = orch(
        "verify-config",
        "--target",
        str(REFERENCE_TARGET),
        "--num-speculative-tokens",
        "3",
        "--json",
    )
    assert warned.code == 0  # one layer: 3 is a multiple, vLLM only warns
    layers2 = tmp_path / "two.json"
    layers2.write_text(json.dumps(mtp_target(2)))
    done = orch("verify-config", "--target", str(layers2), "--num-speculative-tokens", "3")
    assert done.code == 1
    assert done.stdout.startswith("judged as mtp: no drafter config apart from the target's")


@pytest.mark.parametrize(
    "args", [["render", "qwen-dflash", "-i", str(EXAMPLE)], ["profiles", "--json"]]
)
def test_a_reader_gone_before_the_output_ends_it_quietly_with_the_works_status(
    args: list[str],
) -> None:
    """Issue 33 item 4: `orch render ... | head -1`; here the reader is gone before the
    first write, so every write meets the broken pipe."""
    gone, write_end = os.pipe()
    os.close(gone)
    try:
        done = subprocess.run(
            [*COMMAND, *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=PLAIN,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr.decode()) == (0, "")


def test_a_history_filter_that_matches_nothing_says_so_naming_it(tmp_path: Path) -> None:
    env = {**PLAIN, "ORCH_STATE_DIR": str(tmp_path)}
    empty = run_orch("history", env=env)
    assert (empty.code, empty.stdout) == (0, "no runs recorded yet\n")
    nothing = run_orch("history", "--container", "nosuch", "--playbook", "my book", env=env)
    assert nothing.code == 0
    assert nothing.stdout == "no recorded run matches --playbook 'my book' --container nosuch\n"
