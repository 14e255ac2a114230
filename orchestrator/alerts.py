"""`orch alerts`: Prometheus rules that keep watching what the gate measured.

The gate judges a release once, on probe traffic. These rules compute the same
mean acceptance length (1 + accepted tokens / drafts, the bonus token included,
as `metrics/evaluate.py` does) and position-1 acceptance from the same counters
over a sliding window of real traffic, and alert below the playbook's gate
thresholds. Pure: a playbook in, rule groups (plain data) out.

vLLM's counters, as vLLM 0.34.0 defines them:
- `vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`
  (vllm/v1/spec_decode/metrics.py:229-231), and
  `vllm:spec_decode_num_accepted_tokens_per_pos` with a `position` label 0..k-1
  (metrics.py:253-257); prometheus-client exposes counters with `_total`;
- `vllm:generation_tokens` (vllm/v1/metrics/loggers.py:798-801);
- every one labelled `model_name` (the served model name) and `engine` (one
  series per engine of the server: loggers.py:499-505), so each is summed over
  `engine`, leaving one series per scraped server.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from orchestrator.errors import InputError
from orchestrator.playbook import Playbook

PrometheusRules = dict[str, Any]
"""Data in Prometheus's rules-file format (the file's `groups`, a group, a rule): its
keys are Prometheus's (`promtool check rules` reads it)."""

DRAFTS = "vllm:spec_decode_num_drafts_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
"""Prometheus's duration syntax (model/time's ParseDuration), without the empty string."""
INSTANCE = "{{ $labels.instance }}"
VALUE = '{{ $value | printf "%.2f" }}'
"""Prometheus alert templates: the server's address and the value that fired."""


def check_duration(value: str, option: str) -> str:
    if not DURATION.match(value):
        raise InputError(f"{option} {value!r}: expected a Prometheus duration such as 5m or 1h")
    return value


def _per_server(function: str, metric: str, model_name: str, window: str) -> str:
    """`sum without (engine) (function(metric{model_name="..."}[window]))`: one series per
    server (per position, for the per-position counter). The name is quoted as a PromQL
    string (JSON's escapes are Go's)."""
    selector = f"{metric}{{model_name={json.dumps(model_name, ensure_ascii=False)}}}"
    return f"sum without (engine) ({function}({selector}[{window}]))"


def rule_groups(playbook: Playbook, window: str = "5m", hold: str = "15m") -> PrometheusRules:
    """Recording and alerting rules for one playbook's servers, as a rules file's data.

    `window` is the sliding window of the rates; `hold` how long a server must stay
    below a threshold (with at least `gate.min_drafts` drafts in the window) before
    the alert fires: it stands in for the gate's confidence bounds, which a PromQL
    point estimate does not have.
    """
    check_duration(window, "--window")
    check_duration(hold, "--for")
    gate, model = playbook.gate, playbook.target.served_name
    names = {
        "drafts": f"orch:spec_decode_drafts:increase{window}",
        "length": f"orch:spec_decode_mean_acceptance_length:rate{window}",
        "curve": f"orch:spec_decode_acceptance_by_position:rate{window}",
    }
    own = {"playbook": playbook.name}
    mine = f'{{playbook="{playbook.name}"}}'
    drafts_rate = _per_server("rate", DRAFTS, model, window)
    recording = [
        {
            "record": names["drafts"],
            "expr": _per_server("increase", DRAFTS, model, window),
            "labels": dict(own),
        },
        {
            "record": names["length"],
            "expr": f"1 + {_per_server('rate', ACCEPTED, model, window)} / {drafts_rate}",
            "labels": dict(own),
        },
        {
            # The share of drafts that accepted at least position+1 tokens: the curve
            # the gate reports; position 0 is position-1 acceptance.
            "record": names["curve"],
            "expr": f"{_per_server('rate', ACCEPTED_PER_POS, model, window)}"
            f" / ignoring (position) group_left {drafts_rate}",
            "labels": dict(own),
        },
    ]
    enough = f"{names['drafts']}{mine} >= {gate.min_drafts}"
    where = f"playbook {playbook.name}'s gate"
    alerts = [
        _alert(
            "OrchAcceptanceLengthLow",
            f"{names['length']}{mine} < {gate.min_mean_acceptance_length:g} and {enough}",
            hold,
            dict(own),
            f"{INSTANCE}: mean acceptance length {VALUE}"
            f" < {gate.min_mean_acceptance_length:g} ({where})",
            f"Over the last {window}, with at least {gate.min_drafts} drafts, the drafter of "
            "{{ $labels.model_name }} gains fewer tokens per draft step than the gate requires: "
            "real traffic drafts worse than the probes did (long contexts, other languages, "
            "tool calls), or the server changed. Compare with `orch status`.",
        )
    ]
    if gate.min_position1_acceptance is not None:
        alerts.append(
            _alert(
                "OrchPosition1AcceptanceLow",
                f'{names["curve"]}{{playbook="{playbook.name}",position="0"}}'
                f" < {gate.min_position1_acceptance:g} and ignoring (position) {enough}",
                hold,
                dict(own),
                f"{INSTANCE}: position-1 acceptance {VALUE}"
                f" < {gate.min_position1_acceptance:g} ({where})",
                f"Over the last {window}, the share of drafts whose first token the target "
                "accepts is below the gate's minimum; near zero points at a drafter not aligned "
                "with the target (layer ids, mask token).",
            )
        )
    generating = _per_server("rate", GENERATION_TOKENS, model, window)
    alerts.append(
        _alert(
            "OrchSpecDecodeInactive",
            f"{generating} > 0 unless {drafts_rate} > 0",
            hold,
            dict(own),
            f"{INSTANCE}: generating tokens without drafting",
            f"The server of {{{{ $labels.model_name }}}} generated tokens over the last {window} "
            "and counted no drafts (or exposes no speculative-decoding series): speculative "
            "decoding is off. Check --speculative-config in the launch script and the server log.",
        )
    )
    return {
        "groups": [
            {"name": f"orch-{playbook.name}-recording", "rules": recording},
            {"name": f"orch-{playbook.name}-alerts", "rules": alerts},
        ]
    }


def _alert(
    name: str, expr: str, hold: str, labels: dict[str, str], summary: str, description: str
) -> PrometheusRules:
    return {
        "alert": name,
        "expr": expr,
        "for": hold,
        "labels": {"severity": "warning", **labels},
        "annotations": {"summary": summary, "description": description},
    }


def rules_text(playbook: Playbook, groups: PrometheusRules, command: str) -> str:
    """The rules file: a header saying where it came from, then the groups as YAML."""
    gate = playbook.gate
    header = [
        f"# Written by: {command}",
        f"# Playbook {playbook.name}: model_name {json.dumps(playbook.target.served_name)}, gate "
        f"min_mean_acceptance_length {gate.min_mean_acceptance_length:g}, "
        f"min_position1_acceptance {gate.min_position1_acceptance}, "
        f"min_drafts {gate.min_drafts}.",
        "# Load it with rule_files in prometheus.yml; check it with `promtool check rules FILE`.",
    ]
    body = yaml.safe_dump(groups, sort_keys=False, allow_unicode=True, width=1 << 16)
    return "\n".join(header) + "\n" + body
