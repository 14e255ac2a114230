"""Judge a launch against what the vLLM version on the container will do with it.

Pure: the version text, the rendered launch script and the drafter and target
configs in, findings out. The facts come from the capability table
(`capabilities.py`); the findings say what the server will do and the exact fix.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from orchestrator import remotejson
from orchestrator.drafters.findings import Finding
from orchestrator.layout import RELEASE_WORD
from orchestrator.serving.capabilities import (
    FULL_ATTENTION,
    INTEGER,
    ONLY_1,
    REFUSED,
    RUNNER_OFF_REFUSED,
    RUNNER_VARIABLE,
    SERVED,
    V2_DEFAULT,
    Capabilities,
    Row,
    Table,
    UnknownVersion,
    capabilities_for,
    first_release_where,
    load_table,
)

ATTENTION_BACKEND_ENV = "VLLM_ATTENTION_BACKEND"
SLIDING = "sliding_attention"


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


def read_launch(script: str, release_id: str | None = None) -> Launch:
    """`export NAME=VALUE` lines, `--attention-backend`, the speculative config and the
    `exec VLLM serve ...` words of a rendered launch script (as the shell would split
    it), the script's own `$release` read as `release_id` (the release it is in).
    Unreadable parts are skipped: they are then judged as not set."""
    if release_id is not None:
        script = script.replace(RELEASE_WORD, release_id)
    try:  # the shell drops a backslash-newline before it splits words
        words = shlex.split(script.replace("\\\n", ""), comments=True)
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
        value = remotejson.loads(text)
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
    server_checked: bool = False,
) -> list[Finding]:
    """Findings for this launch on vLLM `version` (None: it could not be read, `unreadable`
    says why). A version newer than the table is judged as the newest row, with a warning.
    `server_checked`: the target's own vLLM ran its start-up checks on the host, so what
    depends on the host (the V1 fallback where V2 cannot run) is left to its answer."""
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
    findings += _environment_findings(found, launch)
    findings += _flag_findings(found, launch, table)
    if launch.method is None:
        return findings
    return findings + _method_findings(
        found, launch, drafter or {}, target or {}, table, server_checked
    )


def _environment_findings(found: Capabilities, launch: Launch) -> list[Finding]:
    """The runner variable as this release reads it, and a backend variable it never reads."""
    row, name, findings = found.row, f"vLLM {found.version}", []
    value = launch.env.get(RUNNER_VARIABLE)
    where = row.sources.get("runner_values", "")
    if value is not None and row.runner_values == ONLY_1 and value != "1":
        findings.append(
            Finding.error(
                f"server.env.{RUNNER_VARIABLE}",
                f"{name} refuses {RUNNER_VARIABLE}={value} at start: the V1 model runner is "
                f"removed and only 1 (redundant) is accepted ({where}); unset it",
                expected="unset",
                actual=value,
            )
        )
    elif value is not None and row.runner_values == INTEGER and _integer(value) is None:
        findings.append(
            Finding.error(
                f"server.env.{RUNNER_VARIABLE}",
                f"{name} reads {RUNNER_VARIABLE} as bool(int(value)) ({where}): {value!r} is "
                "a ValueError at start; unset it (vLLM then chooses the runner)",
                expected="unset",
                actual=value,
            )
        )
    if ATTENTION_BACKEND_ENV in launch.env and not row.attention_backend_env_read:
        findings.append(
            Finding.warning(
                f"server.env.{ATTENTION_BACKEND_ENV}",
                f"{name} never reads {ATTENTION_BACKEND_ENV} "
                f"({row.sources.get('attention_backend_env_read', '')}): it changes nothing; "
                "remove it (--attention-backend sets the target's backend)",
                actual=launch.env[ATTENTION_BACKEND_ENV],
            )
        )
    return findings


PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"


def _flag_findings(found: Capabilities, launch: Launch, table: Table) -> list[Finding]:
    """The per-request figures the gate reads, on a release without their flag."""
    if PER_REQUEST_FLAG not in launch.argv or found.row.per_request_spec_decode_metrics:
        return []
    first = first_release_where(lambda r: r.per_request_spec_decode_metrics, found.version, table)
    return [
        Finding.error(
            "gate.acceptance_source",
            f"vLLM {found.version} has no {PER_REQUEST_FLAG} "
            f"({found.row.sources.get('per_request_spec_decode_metrics', '')}; first in "
            f"{first}): the server refuses the launch; set gate.acceptance_source: auto or "
            "counters (the launch then goes without it and the gate reads /metrics counter "
            f"deltas), or upgrade to >= {first}",
            expected=f">= {first}",
            actual=str(found.version),
        )
    ]


def _method_findings(
    found: Capabilities,
    launch: Launch,
    drafter: dict,
    target: dict,
    table: Table,
    server_checked: bool,
) -> list[Finding]:
    row, method, name = found.row, launch.method or "", f"vLLM {found.version}"
    if not row.serves(method):
        first = first_release_where(lambda r: r.serves(method), found.version, table)
        needed = first_release_where(
            lambda r: serves_cleanly(r, method, drafter, target), found.version, table
        )
        return [
            Finding.error(
                "server.version",
                f"{name} has no speculative method {method!r} "
                f"({row.sources.get('methods', '')}; first in {first}): the server refuses "
                f"the launch; upgrade to >= {needed}",
                expected=f">= {needed}",
                actual=str(found.version),
            )
        ]
    findings = _forced_v2_findings(found, launch)
    if method == "dflash" and is_mixed(drafter):
        findings += _mixed_findings(found, launch, drafter, table, server_checked)
    if row.lm_head_zero_for_conditional_generation and (arch := conditional_generation(target)):
        fixed = first_release_where(
            lambda r: not r.lm_head_zero_for_conditional_generation, found.version, table
        )
        findings.append(
            Finding.error(
                "server.version",
                f"{name} keeps the drafter's zero-initialised lm_head for a {arch} target on "
                f"the V2 DFlash path ({row.sources.get('lm_head_zero_for_conditional_generation')}"
                f"): acceptance is near zero whatever the config; upgrade to >= {fixed}",
                expected=f">= {fixed}",
                actual=str(found.version),
            )
        )
    speculative = launch.speculative_config or {}
    if (
        method == "dflash"
        and launch.attention_backend
        and row.drafter_attention_backend == "speculative_config"
        and "attention_backend" not in speculative
    ):
        findings.append(
            Finding.warning(
                "server.attention_backend",
                f"--attention-backend sets the target's backend only: {name} gives the DFlash "
                "drafter the `attention_backend` of --speculative-config "
                f"({row.sources.get('drafter_attention_backend', '')}), unset here (vLLM "
                "picks one); set server.speculative_config.attention_backend for the drafter",
                actual=launch.attention_backend,
            )
        )
    return findings


def _forced_v2_findings(found: Capabilities, launch: Launch) -> list[Finding]:
    """The variable forcing the V2 runner (a non-zero integer) with a method that runner
    lacks: the engine config refuses the launch before any model loads."""
    row, value = found.row, launch.env.get(RUNNER_VARIABLE)
    refused = row.v2_refused_methods.get(launch.method or "")
    if row.runner_values != INTEGER or not refused or not _integer(value):
        return []
    return [
        Finding.error(
            f"server.env.{RUNNER_VARIABLE}",
            f"vLLM {found.version} has no speculative method {launch.method!r} on the V2 "
            f"model runner, which {RUNNER_VARIABLE}={value} forces: the server exits at "
            f"start with {refused!r} ({row.sources.get('v2_refused_methods', '')}); unset "
            "it (vLLM then runs this method on the V1 runner)",
            expected="unset",
            actual=value,
        )
    ]


def _mixed_findings(
    found: Capabilities, launch: Launch, drafter: dict, table: Table, server_checked: bool
) -> list[Finding]:
    row, name = found.row, f"vLLM {found.version}"
    window = sliding_window(drafter)
    served = first_release_where(
        lambda r: r.mixed_attention_drafters in (*RUNNER_OFF_REFUSED, SERVED), found.version, table
    )
    where = row.sources.get("mixed_attention_drafters", "")
    if row.mixed_attention_drafters == FULL_ATTENTION:
        return [
            Finding.error(
                "server.version",
                f"{name} runs this drafter's sliding layers as full attention ({where}): "
                f"acceptance passes a short-prompt gate and collapses once the context passes "
                f"the {window}-token window; upgrade to >= {served}",
                expected=f">= {served}",
                actual=str(found.version),
            )
        ]
    if row.mixed_attention_drafters == REFUSED:
        return [
            Finding.error(
                "server.version",
                f"{name} refuses drafters that mix sliding and full attention layers; the "
                f"server exits at start with {row.error!r} ({where}); upgrade to >= {served}",
                expected=f">= {served}",
                actual=str(found.version),
            )
        ]
    value = launch.env.get(RUNNER_VARIABLE)
    refusal = row.sources.get("error", "")
    if row.mixed_attention_drafters in RUNNER_OFF_REFUSED and _integer(value) == 0:
        return [
            Finding.error(
                f"server.env.{RUNNER_VARIABLE}",
                f"{name} serves drafters that mix sliding and full attention layers on the V2 "
                f"model runner ({where}); {RUNNER_VARIABLE}={value} forces V1, and the server "
                f"exits at start with {row.error!r} ({refusal}); unset it",
                expected="unset",
                actual=value,
            )
        ]
    if row.mixed_attention_drafters == V2_DEFAULT and value is None and not server_checked:
        return [
            Finding.warning(
                "server.version",
                f"{name} serves drafters that mix sliding and full attention layers on the V2 "
                f"model runner, its default ({where}), but falls back to V1 where V2 cannot "
                "run (no Triton, as in vLLM's CPU build; a feature of the launch V2 lacks), "
                f"and V1 refuses this drafter at start with {row.error!r} ({refusal}); not "
                f"checked on the host: on such a host set {RUNNER_VARIABLE}=1 to be told why "
                "V2 cannot run",
            )
        ]
    return []


def _integer(value: str | None) -> int | None:
    """As vLLM's maybe_convert_bool reads a variable: int(value), else nothing."""
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def serves_cleanly(row: Row, method: str, drafter: dict, target: dict) -> bool:
    """The row serves this method, drafter and target as trained."""
    mixed_ok = not (method == "dflash" and is_mixed(drafter)) or (
        row.mixed_attention_drafters in (*RUNNER_OFF_REFUSED, SERVED)
    )
    head_ok = not (row.lm_head_zero_for_conditional_generation and conditional_generation(target))
    return bool(row.serves(method)) and mixed_ok and head_ok


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
