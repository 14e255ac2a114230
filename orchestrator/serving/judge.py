"""Judge a launch against what the vLLM version on the container will do with it.

Pure: the version text, the rendered launch script and the drafter and target
configs in, findings out. The facts come from the capability table
(`capabilities.py`); the findings say what the server will do and the exact fix.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from orchestrator.drafters.findings import Finding
from orchestrator.serving.capabilities import (
    FULL_ATTENTION,
    REFUSED,
    V2_RUNNER,
    Capabilities,
    Row,
    Table,
    UnknownVersion,
    capabilities_for,
    first_release_where,
    load_table,
)

ATTENTION_BACKEND_ENV = "VLLM_ATTENTION_BACKEND"
DOCUMENTED_BACKEND = "flash_attn"
"""z-lab/dflash README: `vllm serve ... --attention-backend flash_attn`."""
SLIDING, FULL = "sliding_attention", "full_attention"


@dataclass(frozen=True)
class Launch:
    """What a launch script sets that the server's behaviour depends on; `executable`
    and `argv` (its words from `serve` on) when the script ends in `exec VLLM serve`."""

    env: dict[str, str] = field(default_factory=dict)
    attention_backend: str | None = None
    method: str | None = None
    speculative_config: dict | None = field(default=None, compare=False)
    executable: str | None = field(default=None, compare=False)
    argv: tuple[str, ...] = field(default=(), compare=False)


def read_launch(script: str) -> Launch:
    """`export NAME=VALUE` lines, `--attention-backend`, the speculative config and the
    `exec VLLM serve ...` words of a rendered launch script (as the shell would split
    it). Unreadable parts are skipped: they are then judged as not set."""
    try:
        words = shlex.split(script, comments=True)
    except ValueError:
        return Launch()
    env: dict[str, str] = {}
    backend = method = speculative = None
    executable: str | None = None
    argv: tuple[str, ...] = ()
    if "exec" in words and words.index("exec") + 2 < len(words):
        start = words.index("exec")
        if words[start + 2] == "serve":
            executable, argv = words[start + 1], tuple(words[start + 2 :])
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else None
        if word == "export" and following and "=" in following:
            name, _, value = following.partition("=")
            env[name] = value
        elif word == "--attention-backend" and following:
            backend = following
        elif word.startswith("--attention-backend="):
            backend = word.partition("=")[2]
        elif word == "--speculative-config" and following:
            speculative = _json_object(following)
            found = speculative.get("method") if speculative else None
            method = found if isinstance(found, str) else None
    return Launch(env, backend, method, speculative, executable, argv)


def _json_object(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def judge_server(
    version: str | None,
    launch: Launch,
    drafter: dict | None,
    target: dict | None,
    *,
    unreadable: str = "",
    table: Table | None = None,
) -> list[Finding]:
    """Findings for this launch on vLLM `version` (None: it could not be read, `unreadable`
    says why). A version newer than the table is judged as the newest row, with a warning."""
    table = table or load_table()
    if version is None:
        return [
            Finding.warning(
                "server.version",
                f"could not read the vLLM version on the container ({unreadable or 'no output'}): "
                "the checks of what this vLLM does with the drafter were skipped",
            )
        ]
    try:
        found = capabilities_for(version, table)
    except UnknownVersion as exc:
        return [
            Finding.warning(
                "server.version",
                f"{exc}: the checks of what this vLLM does with the drafter were skipped",
                actual=version[:80],
            )
        ]
    findings = []
    if found.assumed:
        findings.append(
            Finding.warning(
                "server.version",
                f"vLLM {found.version} is newer than the capability table ({table.source}): "
                f"assumed it behaves like {found.row.range} (mixed sliding/full drafters: "
                f"{found.row.mixed_attention_drafters}); add a row for it",
                expected=str(found.row.range),
                actual=str(found.version),
            )
        )
    if launch.method is None:
        return findings
    return findings + _method_findings(found, launch, drafter or {}, target or {}, table)


def _method_findings(
    found: Capabilities, launch: Launch, drafter: dict, target: dict, table: Table
) -> list[Finding]:
    row, method, name = found.row, launch.method or "", f"vLLM {found.version}"
    if row.serves(method) is False:
        first = first_release_where(lambda r: r.serves(method), found.version, table)
        needed = first_release_where(
            lambda r: serves_cleanly(r, method, drafter, target), found.version, table
        )
        hint = _runner_hint(table) if method == "dflash" and is_mixed(drafter) else ""
        return [
            Finding.error(
                "server.version",
                f"{name} has no speculative method {method!r} (first in {first}): the server "
                f"refuses the launch; upgrade to >= {needed}{hint}",
                expected=f">= {needed}",
                actual=str(found.version),
            )
        ]
    findings = []
    if method == "dflash" and is_mixed(drafter):
        findings += _mixed_findings(found, launch, drafter, table)
    if row.lm_head_zero_for_conditional_generation and (arch := conditional_generation(target)):
        fixed = first_release_where(
            lambda r: not r.lm_head_zero_for_conditional_generation, found.version, table
        )
        findings.append(
            Finding.error(
                "server.version",
                f"{name} keeps the drafter's zero-initialised lm_head for a {arch} target "
                f"(fixed in vllm-project/vllm PR #47914): acceptance is near zero whatever "
                f"the config; upgrade to >= {fixed}",
                expected=f">= {fixed}",
                actual=str(found.version),
            )
        )
    backend = launch.attention_backend or launch.env.get(ATTENTION_BACKEND_ENV)
    if method == "dflash" and not backend:
        findings.append(
            Finding.warning(
                "server.attention_backend",
                "no attention backend is set: the DFlash drafter needs non-causal attention "
                "and vLLM's automatic choice has failed on some GPUs; set "
                f"server.attention_backend: {DOCUMENTED_BACKEND} (z-lab's documented command)",
                expected=DOCUMENTED_BACKEND,
                actual=None,
            )
        )
    return findings


def _mixed_findings(
    found: Capabilities, launch: Launch, drafter: dict, table: Table
) -> list[Finding]:
    row, name = found.row, f"vLLM {found.version}"
    window = sliding_window(drafter)
    served = first_release_where(
        lambda r: r.mixed_attention_drafters == V2_RUNNER, found.version, table
    )
    upgrade = f"upgrade to >= {served}" + _runner_hint(table)
    if row.mixed_attention_drafters == FULL_ATTENTION:
        return [
            Finding.error(
                "server.version",
                f"{name} runs this drafter's sliding layers as full attention: acceptance "
                f"passes a short-prompt gate and collapses once the context passes the "
                f"{window}-token window; {upgrade}",
                expected=f">= {served}",
                actual=str(found.version),
            )
        ]
    if row.mixed_attention_drafters == REFUSED:
        return [
            Finding.error(
                "server.version",
                f"{name} refuses drafters that mix sliding and full attention layers; the "
                f"server exits at start with {row.error!r}; {upgrade}",
                expected=f">= {served}",
                actual=str(found.version),
            )
        ]
    if row.mixed_attention_drafters == V2_RUNNER and row.runner_env:
        value = launch.env.get(row.runner_env)
        if not runner_enabled(value):
            return [
                Finding.error(
                    f"server.env.{row.runner_env}",
                    f"{name} serves drafters that mix sliding and full attention layers only "
                    f"on the V2 model runner; without it the server exits at start with "
                    f'{row.error!r}; set server.env {row.runner_env}: "1"',
                    expected="1",
                    actual=value,
                )
            ]
    return []


def _runner_hint(table: Table) -> str:
    rows = [r for r in table.rows if r.mixed_attention_drafters == V2_RUNNER]
    runner = rows[0].runner_env if rows else None
    return f' with server.env {runner}: "1"' if runner else ""


def serves_cleanly(row: Row, method: str, drafter: dict, target: dict) -> bool:
    """The row serves this method, drafter and target as trained (given the runner's
    variable where the row needs it)."""
    mixed_ok = not (method == "dflash" and is_mixed(drafter)) or (
        row.mixed_attention_drafters == V2_RUNNER
    )
    head_ok = not (row.lm_head_zero_for_conditional_generation and conditional_generation(target))
    return bool(row.serves(method)) and mixed_ok and head_ok


def runner_enabled(value: str | None) -> bool:
    """As vLLM reads a boolean variable (vllm/envs.py maybe_convert_bool: bool(int(value)))."""
    try:
        return value is not None and bool(int(value))
    except ValueError:
        return False


def is_mixed(drafter: dict) -> bool:
    """The drafter's `layer_types` mix sliding-window and full attention layers."""
    layer_types = drafter.get("layer_types")
    if not isinstance(layer_types, list):
        return False
    return SLIDING in layer_types and any(t != SLIDING for t in layer_types)


def sliding_window(drafter: dict) -> object:
    """The window the server uses: `dflash_config.swa_window_size` wins over `sliding_window`."""
    dflash = drafter.get("dflash_config")
    override = dflash.get("swa_window_size") if isinstance(dflash, dict) else None
    return override if override is not None else drafter.get("sliding_window")


def conditional_generation(target: dict) -> str | None:
    """The target's `*ForConditionalGeneration` architecture, if it is one."""
    architectures = target.get("architectures")
    if not isinstance(architectures, list):
        return None
    return next(
        (a for a in architectures if isinstance(a, str) and a.endswith("ForConditionalGeneration")),
        None,
    )
