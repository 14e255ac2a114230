"""The server's own dry run: the command that finds vLLM's Python, the strict reading of
the program's reply, and the findings it gives. The program itself runs against real
vLLM in tests/test_server_check_real.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchestrator.container import validator
from orchestrator.drafters.findings import Severity
from orchestrator.serving import server_check
from orchestrator.serving.judge import read_launch
from orchestrator.transport.base import Result
from orchestrator.transport.memory import MemoryTransport, reply

LAUNCH = read_launch(
    "#!/bin/sh\nexport VLLM_USE_V2_MODEL_RUNNER=true\n"
    "exec /opt/vllm/bin/vllm serve /m --speculative-config "
    '\'{"method": "dflash", "model": "/r/drafter", "num_speculative_tokens": 4, "bogus": 1}\' '
    "--port 8000\n"
)


def stage(name: str, status: str = "ok", detail: str = "", **extra: object) -> dict:
    return {"name": name, "status": status, "detail": detail, "seconds": 0.5, **extra}


def document(*stages: dict) -> bytes:
    return json.dumps({"version": "0.34.0", "stages": list(stages), "seconds": 12.5}).encode()


def test_the_launch_reads_as_the_argv_and_env_the_script_execs() -> None:
    assert LAUNCH.executable == "/opt/vllm/bin/vllm"
    assert LAUNCH.argv[:2] == ("serve", "/m") and LAUNCH.argv[-2:] == ("--port", "8000")
    assert LAUNCH.env == {"VLLM_USE_V2_MODEL_RUNNER": "true"}
    payload = validator.request(LAUNCH.argv, LAUNCH.env, {"/r/drafter": {"config.json": "{}"}})
    assert payload == {
        "argv": list(LAUNCH.argv),
        "env": {"VLLM_USE_V2_MODEL_RUNNER": "true"},
        "stage": {"/r/drafter": {"config.json": "{}"}},
    }


@pytest.mark.parametrize(
    ("first_line", "expected"),
    [
        ("#!/srv/venv/bin/python3", "/srv/venv/bin/python3"),
        ("#!/usr/bin/python3.11 -E", "/usr/bin/python3.11"),
        ("#!/bin/sh", "{dir}/python"),
        ("", "{dir}/python"),
    ],
)
def test_the_python_is_the_console_scripts_shebang_else_the_one_beside_it(
    tmp_path: Path, first_line: str, expected: str
) -> None:
    """Run under a real /bin/sh: `exec` is replaced by a stand-in that prints what ran."""
    vllm = tmp_path / "vllm"
    vllm.write_text(first_line + "\n")
    argv = validator.validate_launch(str(vllm), {"argv": ["serve"]})
    script = argv[2].replace(
        '[ -x "$python" ] && exec "$python" - "$@"', 'printf "%s\\n" "$python"; exit 0'
    )
    done = subprocess.run(
        [argv[0], "-c", script, *argv[3:]], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [expected.format(dir=tmp_path)]


def test_without_its_python_the_same_process_says_the_version_vllm_gives(
    tmp_path: Path,
) -> None:
    """A `vllm` with no Python beside it (a wrapper script): one command, exit 127, the
    version on stdout; the check is unavailable and carries what `--version` printed."""
    vllm = tmp_path / "vllm"
    vllm.write_text("#!/bin/sh\necho 'INFO starting'\necho 0.32.0\n")
    vllm.chmod(0o755)

    def run(argv: list[str], stdin: bytes | None) -> Result:
        done = subprocess.run(argv, input=stdin, capture_output=True, check=False)
        return Result(tuple(argv), done.returncode, done.stdout, done.stderr)

    transport = MemoryTransport().on("validate_launch", run)
    found = validator.check(transport, str(vllm), {"argv": ["serve"]})
    assert found.reply is None and "exit 127" in found.unavailable
    assert found.version_said is not None and found.version_said.split() == [
        "INFO",
        "starting",
        "0.32.0",
    ]
    assert len(transport.calls) == 1


def test_a_missing_vllm_means_the_python_beside_it(tmp_path: Path) -> None:
    argv = validator.validate_launch(str(tmp_path / "vllm"), {})
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 127 and f"{tmp_path}/python" in done.stderr


@pytest.mark.parametrize(
    ("stdout", "problem"),
    [
        (b"", "not one JSON document"),
        (b"INFO loading\n{}", "not one JSON document"),
        (b"\xff\xfe", "not one JSON document"),
        (b"[1, 2]", "unexpected shape"),
        (document(stage("parser"))[:-1] + b', "extra": 1}', "unexpected shape"),
        (document(stage("rm -rf /")), "unexpected shape"),
        (document(stage("parser", "weird")), "unexpected shape"),
        (document(stage("parser", detail="x" * 5000)), "unexpected shape"),
        (b" " * (validator.MAX_REPLY + 1), "more than"),
        (b'{"failed": "Traceback: boom"}', "the program failed: Traceback: boom"),
    ],
)
def test_a_reply_of_any_other_shape_is_refused(stdout: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        validator.parse(stdout)


def test_markup_and_escapes_in_a_reply_stay_text() -> None:
    hostile = "[bold red]x[/] \x1b[2J $(reboot)"
    found = validator.parse(document(stage("parser", "error", hostile)))
    [finding] = server_check.findings(validator.ServerCheck(found), LAUNCH)
    assert finding.message.endswith(hostile)


def test_vllms_refusal_of_a_variable_is_an_error_naming_it() -> None:
    words = (
        "ValueError: VLLM_USE_V2_MODEL_RUNNER=true is no longer supported: "
        "Model Runner V1 has been removed. Unset this variable."
    )
    reply_ = validator.parse(document(stage("parser"), stage("environment", "error", words)))
    [finding] = server_check.findings(validator.ServerCheck(reply_), LAUNCH)
    assert finding.severity == Severity.ERROR
    assert finding.field == "server.env.VLLM_USE_V2_MODEL_RUNNER"
    assert finding.message == (
        f"vLLM 0.34.0 refuses this launch at start (its environment check): {words}"
    )


def test_an_unknown_speculative_key_is_an_error_naming_the_key() -> None:
    words = "ValidationError: 1 validation error for SpeculativeConfig\nbogus\n  Unexpected"
    reply_ = validator.parse(
        document(
            stage("parser"),
            stage("environment"),
            stage("engine_args"),
            stage("model_config"),
            stage("speculative_config", "error", words, keys=["bogus"]),
        )
    )
    [finding] = server_check.findings(validator.ServerCheck(reply_), LAUNCH)
    assert finding.field == "server.speculative_config.bogus"
    assert "SpeculativeConfig" in finding.message


def test_an_unknown_flag_is_an_error_naming_the_flag() -> None:
    launch = read_launch("exec /v/vllm serve /m --bogus-flag 3\n")
    words = "vllm serve: error: unrecognized arguments: --bogus-flag 3"
    reply_ = validator.parse(document(stage("parser", "error", words)))
    [finding] = server_check.findings(validator.ServerCheck(reply_), launch)
    assert finding.field == "server.args --bogus-flag"


def test_what_this_vllm_lacks_is_one_warning_saying_the_table_judges_it() -> None:
    reply_ = validator.parse(
        document(
            stage("parser"),
            stage("environment", absent="validate_environ"),
            stage("engine_args"),
            stage("model_config"),
            stage("speculative_config", warnings=["Unknown key? no: a warning"]),
            stage("drafter_layers", "absent", "qwen3_dflash has no _resolve_layer_attention"),
        )
    )
    found = server_check.findings(validator.ServerCheck(reply_), LAUNCH)
    assert [(f.severity, f.field) for f in found] == [
        (Severity.WARNING, "server.speculative_config"),
        (Severity.WARNING, "server.check"),
    ]
    assert found[1].message == (
        "not checked by the server (vLLM 0.34.0): its environment check: validate_environ "
        "is absent; the DFlash layer resolver (qwen3_dflash has no _resolve_layer_attention); "
        "orch's capability table judges these"
    )


def test_a_target_that_cannot_run_the_program_is_a_warning_not_a_failure() -> None:
    transport = MemoryTransport().on("validate_launch", reply(b"", 127, b"python: not found"))
    found = validator.check(transport, "/opt/vllm/bin/vllm", {})
    assert found.reply is None and "exit 127: python: not found" in found.unavailable
    [finding] = server_check.findings(found, LAUNCH)
    assert finding.severity == Severity.WARNING and "not checked by the server" in finding.message
    [call] = transport.calls
    assert call.stdin == validator.program()
