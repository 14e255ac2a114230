from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from filetree import write

from orchestrator.errors import InputError
from orchestrator.render import MissingVar, render_field, render_template


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


def test_tojson_round_trips() -> None:
    value = {"model": "/r/d", "n": 15, "ids": [1, 16]}
    text = render_field("{{ value | tojson }}", {"value": value}, "here")
    assert json.loads(text) == value


def test_field_with_undefined_var_names_where() -> None:
    with pytest.raises(MissingVar, match=r"^playbook.yaml: target.path: needs vars.models_dir$"):
        render_field("{{ vars.models_dir }}/x", {"vars": {}}, "playbook.yaml: target.path")
    with pytest.raises(InputError, match=r"^f: 'dict object' has no attribute 'ip'$"):
        render_field("{{ container.ip }}", {"vars": {}, "container": {}}, "f")


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
        "per_request_metrics": True,
        "extra_args": ["--enforce-eager"],
        "secrets_file": "/r/it's $(x)/secrets.env",
        "secret_names": "VLLM_API_KEY",
    }
    script = render_template("vllm/serve.sh.j2", context)
    sourced = [line for line in script.splitlines() if line.startswith(". ")]
    assert [shlex.split(line) for line in sourced] == [[".", "/r/it's $(x)/secrets.env"]]
    exec_line = script[script.index("exec ") :].replace("\\\n", " ")
    argv = shlex.split(exec_line)
    assert argv[:4] == ["exec", "/opt/v llm/vllm", "serve", "/m/$(touch z)"]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == context["speculative_config"]
    assert argv[argv.index("--served-model-name") + 1] == "q;rm"
    assert "--attention-backend" not in argv and "--enforce-eager" in argv
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "summary"
    assert "export HF_HOME='/x y'" in script


@pytest.mark.parametrize(
    "payload",
    [
        '{{ cycler.__init__.__globals__.os.system("touch MARK") }}',
        "{{ vars.__class__.__mro__[1].__subclasses__() }}",
        "{{ vars.models_dir.__class__ }}",
        '{{ self.__init__.__globals__["os"].system("touch MARK") }}',
        "{{ lipsum.__globals__ }}",
    ],
)
def test_fields_cannot_reach_python(
    payload: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"^target.path: "):
        render_field(payload, {"vars": {"models_dir": "/m"}}, "target.path")
    assert list(tmp_path.iterdir()) == []


def test_fields_cannot_mutate_their_context() -> None:
    context = {"vars": {"models_dir": "/m"}}
    with pytest.raises(InputError, match=r"not allowed in a template: .*'update'"):
        render_field("{{ vars.update({'models_dir': '/x'}) }}", context, "f")
    assert context == {"vars": {"models_dir": "/m"}}


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("{{ 'a' * 10**9 }}", "a repetition longer than"),
        ("{{ [0] * 10**9 }}", "a repetition longer than"),
        ("{{ 7 ** 10000000 }}", "a power beyond"),
        ("{{ 1 / 0 }}", "ZeroDivisionError: division by zero"),
        ("{{ 1 + 'a' }}", "TypeError: unsupported operand"),
        ("{{ vars.models_dir | attr('x') }}", "No filter named 'attr'"),
        ("{{ range(10) }}", "'range' is undefined"),
    ],
)
def test_expensive_or_broken_expressions_are_bad_input(expression: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        render_field(expression, {"vars": {"models_dir": "/m"}}, "f")


def test_ordinary_expressions_still_work() -> None:
    text = "{{ vars.d }}/{{ 'x' * 3 }}/{{ 2 ** 10 }}/{{ vars.n * 1000000 }}"
    assert render_field(text, {"vars": {"d": "/m", "n": 7}}, "f") == "/m/xxx/1024/7000000"
