"""Secrets as pure units: the sources' rules, digests, the release's
file, the key vLLM would check, masking, and the warnings for keys in the open."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from masking import pieces_of
from pydantic import ValidationError
from secretbooks import book

from orchestrator import secrets
from orchestrator.errors import InputError
from orchestrator.fleet.doctor import secret_checks
from orchestrator.playbook import Server


def test_a_source_is_exactly_one_of_env_file_command(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="give exactly one of env, file or command"):
        book(tmp_path, "{A: {env: K, file: /x}}")
    with pytest.raises(ValidationError, match="A is in both env and secrets"):
        Server.model_validate({"env": {"A": "1"}, "secrets": {"A": {"env": "K"}}})


def test_digests_tell_values_apart_and_depend_on_the_deployment() -> None:
    one = secrets.digest("value", "p", "A")
    assert one == secrets.digest("value", "p", "A")
    assert one != secrets.digest("other", "p", "A")
    assert one != secrets.digest("value", "q", "A")
    assert "value" not in one and len(one) == 32


def test_the_file_round_trips_any_value_and_hides_it_behind_a_nonce() -> None:
    values = {"VLLM_API_KEY": 'it\'s $(rm -rf /) `x` "q"', "B": "plain"}
    first, second = secrets.secrets_file(values), secrets.secrets_file(values)
    assert first != second  # the nonce: no plain hash of the file says anything
    assert secrets.parse_exports(first) == values


def test_the_probe_key_is_the_one_vllm_would_check() -> None:
    launch = b"#!/bin/sh\nexport VLLM_API_KEY=plain\nexec vllm serve /m \\\n  --port 8000\n"
    with_file = secrets.secrets_file({"VLLM_API_KEY": "secret"})
    plain = secrets.probe_key(launch, None)
    assert plain is not None and plain.value == "plain" and "server.env" in plain.source
    key = secrets.probe_key(launch, with_file)
    assert key is not None and key.value == "secret" and "server.secrets" in key.source
    flagged = launch.replace(b"--port 8000", b"--api-key 'from flag' other \\\n  --port 8000")
    key = secrets.probe_key(flagged, with_file)
    assert key is not None and key.value == "from flag" and "--api-key" in key.source
    assert secrets.probe_key(b"exec vllm serve /m --api-key=eq\n", None).value == "eq"  # type: ignore[union-attr]
    assert secrets.probe_key(b"exec vllm serve /m\n", None) is None
    assert "secret" not in repr(key)


def test_registered_values_are_masked_everywhere_in_a_document() -> None:
    secrets.register(["s3cr3t-value"])
    assert secrets.mask("a s3cr3t-value b") == "a *** b"
    document = {"x": ['s3cr3t-value"', {"s3cr3t-value": 1}], "n": 2}
    assert secrets.mask_document(document) == {"x": ['***"', {"***": 1}], "n": 2}


def test_keys_in_the_open_are_warnings_naming_the_secrets_form() -> None:
    server = Server.model_validate(
        {"env": {"HF_TOKEN": "x", "OTHER": "y"}, "extra_args": ["--api-key", "k"]}
    )
    findings = secrets.plain_findings(server)
    assert [f.field for f in findings] == ["server.env.HF_TOKEN", "server.extra_args"]
    assert "server.secrets.HF_TOKEN" in findings[0].message
    assert "server.secrets.VLLM_API_KEY" in findings[1].message


def test_doctor_checks_each_secret_resolves_and_never_shows_a_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIVEN", "s3cret-value")
    monkeypatch.delenv("MISSING", raising=False)
    (tmp_path / "empty").write_text("")
    playbook = book(
        tmp_path,
        f"{{A: {{env: GIVEN}}, B: {{env: MISSING}}, C: {{file: {tmp_path / 'empty'}}}}}",
    )
    checks = secret_checks(playbook)  # type: ignore[arg-type]
    assert [(c.target, c.check, c.status) for c in checks] == [
        ("control", "secret A", "ok"),
        ("control", "secret B", "fail"),
        ("control", "secret C", "fail"),
    ]
    assert checks[0].detail == "environment variable GIVEN gives a value"
    assert checks[1].detail.endswith("server.secrets.B: environment variable MISSING is not set")
    assert checks[2].detail.endswith(f"server.secrets.C: file {tmp_path / 'empty'} is empty")
    assert checks[1].fix == "make environment variable MISSING give the value before deploying"
    assert "s3cret-value" not in repr(checks)


def test_a_value_split_across_writes_is_masked_and_other_text_still_flows() -> None:
    secrets.register(["hunter2-split-value"])
    out = io.StringIO()
    stream = secrets.MaskedStream(out)
    stream.write("key=hunter2-")
    assert out.getvalue() == "key="  # the start of a value waits for the next write
    stream.write("split-value and more\n")
    stream.write("hun")
    stream.write("ting season, hunter")
    stream.flush()  # the writer asks for all of it: a start that never became a value
    assert out.getvalue() == "key=*** and more\nhunting season, hunter"


KEY = "sk-cut-3f9a1c7e5b2d4086a1c3e5f7b9d0"


@pytest.mark.parametrize("kept", [8, 12, 20, 31])
def test_a_key_cut_at_any_point_shows_no_piece_of_it(kept: int) -> None:
    """A server log line cut at 2000 bytes on the container with the key across the cut,
    and the rest of it on a later line."""
    secrets.register([KEY])
    line = ("x" * (2000 - kept) + KEY)[:2000]
    rest = KEY[kept:] + " then more"
    for text in (line, rest, f"{line}\n{rest}"):
        masked = secrets.mask(text)
        assert not pieces_of(KEY, masked), masked[-60:]
    assert secrets.mask(line).endswith("x***")
    assert secrets.mask("short pieces stay: sk-cut-") == "short pieces stay: sk-cut-"


def test_a_cut_key_in_a_document_is_masked_in_every_string() -> None:
    secrets.register([KEY])
    document = {"error": "HTTP 401: " + KEY[:20], "log": [KEY[5:30] + "..."]}
    masked = secrets.mask_document(document)
    assert masked == {"error": "HTTP 401: ***", "log": ["***..."]}
