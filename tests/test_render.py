from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import InputError
from orchestrator.render import render_field, render_template


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_undefined_variable_names_the_variable_and_template_line(tmp_path: Path) -> None:
    write(tmp_path, "t.j2", "line one\n{{ defined }}\n{{ missing_thing }}\n")
    with pytest.raises(InputError) as caught:
        render_template("t.j2", {"defined": 1}, tmp_path)
    assert str(caught.value) == f"{tmp_path / 't.j2'}:3: 'missing_thing' is undefined"


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    write(tmp_path, "t.j2", "ok\n{% if %}\n")
    with pytest.raises(InputError, match=rf"^{tmp_path / 't.j2'}:2: "):
        render_template("t.j2", {}, tmp_path)


def test_missing_template_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"template 'nope\.j2' not found"):
        render_template("nope.j2", {}, tmp_path)


def test_shquote_survives_a_real_shell(tmp_path: Path) -> None:
    hostile = "a b'c\"$(touch x);`touch y`\nz"
    write(tmp_path, "t.j2", "printf %s {{ value | shquote }}")
    script = render_template("t.j2", {"value": hostile}, tmp_path)
    out = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout == hostile
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_tojson_round_trips() -> None:
    value = {"model": "/r/d", "n": 15, "ids": [1, 16]}
    text = render_field("{{ value | tojson }}", {"value": value}, "here")
    assert json.loads(text) == value


def test_field_with_undefined_var_names_where() -> None:
    with pytest.raises(InputError, match=r"^playbook.yaml: target.path: 'dict object' has no"):
        render_field("{{ vars.models_dir }}/x", {"vars": {}}, "playbook.yaml: target.path")


def test_launch_script_quotes_every_value() -> None:
    context = {
        "playbook": "p",
        "release_id": "abc",
        "container": "ct1",
        "env": {"HF_HOME": "/x y"},
        "vllm": "/opt/v llm/vllm",
        "target": "/m/$(touch z)",
        "speculative_config": {"method": "dflash", "model": "/r/d", "num_speculative_tokens": 15},
        "served_name": "q;rm",
        "host": "127.0.0.1",
        "port": 8000,
        "tensor_parallel_size": 2,
        "max_model_len": 4096,
        "attention_backend": None,
        "extra_args": ["--enforce-eager"],
    }
    script = render_template("vllm/serve.sh.j2", context)
    exec_line = script[script.index("exec ") :].replace("\\\n", " ")
    argv = shlex.split(exec_line)
    assert argv[:4] == ["exec", "/opt/v llm/vllm", "serve", "/m/$(touch z)"]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == context["speculative_config"]
    assert argv[argv.index("--served-model-name") + 1] == "q;rm"
    assert "--attention-backend" not in argv and "--enforce-eager" in argv
    assert "export HF_HOME='/x y'" in script
