"""`orch alerts`: Prometheus rules from a playbook's gate, checked and run by promtool
(Prometheus's own rule engine) where it is installed, and by their shape everywhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from orchestrator import alerts
from orchestrator.cli import cli
from orchestrator.contract import Document
from orchestrator.errors import InputError
from orchestrator.playbook import PLAYBOOK_DIR, load_playbook

PROMTOOL = os.environ.get("PROMTOOL") or shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not found (Debian: apt-get install prometheus; or set PROMTOOL)",
)
MODEL = "qwen3.6-27b"
LENGTH = "orch:spec_decode_mean_acceptance_length:rate5m"
CURVE = "orch:spec_decode_acceptance_by_position:rate5m"


def rules(*assignments: str, window: str = "5m", hold: str = "15m") -> str:
    result = CliRunner().invoke(
        cli,
        ["alerts", "qwen-dflash", *(a for s in assignments for a in ("--set", s)),
         "--window", window, "--for", hold],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return result.output


def by_name(text: str) -> dict[str, dict]:
    groups = yaml.safe_load(text)["groups"]
    return {r.get("record") or r["alert"]: r for g in groups for r in g["rules"]}


def test_the_rules_carry_the_playbooks_thresholds_and_model() -> None:
    book = load_playbook(PLAYBOOK_DIR / "qwen-dflash.yaml")
    found = by_name(rules())
    low = found["OrchAcceptanceLengthLow"]
    assert f"< {book.gate.min_mean_acceptance_length:g} and" in low["expr"]
    assert f">= {book.gate.min_drafts}" in low["expr"]
    assert low["for"] == "15m" and low["labels"] == {"severity": "warning", "playbook": book.name}
    position1 = found["OrchPosition1AcceptanceLow"]["expr"]
    minimum = book.gate.min_position1_acceptance
    assert f'{CURVE}{{playbook="qwen-dflash",position="0"}} < {minimum:g} and ign' in position1
    curve = found[CURVE]["expr"]
    assert curve.startswith("sum without (engine) (rate(vllm:spec_decode_num_accepted_tokens_per")
    assert "/ ignoring (position) group_left sum without (engine)" in curve
    length = found["orch:spec_decode_mean_acceptance_length:rate5m"]["expr"]
    assert length.startswith("1 + sum without (engine) (rate(")
    assert f'vllm:spec_decode_num_accepted_tokens_total{{model_name="{MODEL}"}}[5m]' in length
    assert "vllm:spec_decode_num_drafts_total" in length


def test_set_overrides_reach_the_rules_and_a_null_position1_has_no_alert() -> None:
    found = by_name(
        rules(
            "gate.min_mean_acceptance_length=3.25",
            "gate.min_position1_acceptance=null",
            "gate.min_drafts=50",
            window="10m",
            hold="1h",
        )
    )
    low = found["OrchAcceptanceLengthLow"]
    assert "rate10m" in low["expr"] and "< 3.25 and" in low["expr"] and ">= 50" in low["expr"]
    assert low["for"] == "1h"
    assert "OrchPosition1AcceptanceLow" not in found


def test_a_served_name_is_quoted_as_a_promql_string() -> None:
    book = load_playbook(PLAYBOOK_DIR / "qwen-dflash.yaml", ['target.served_name=a"b\\c'])
    expr = by_name(yaml.safe_dump(alerts.rule_groups(book)))["orch:spec_decode_drafts:increase5m"][
        "expr"
    ]
    assert '{model_name="a\\"b\\\\c"}' in expr


@pytest.mark.parametrize("bad", ["5", "five minutes", "", "5m)"])
def test_a_window_that_is_no_duration_is_bad_input(bad: str) -> None:
    book = load_playbook(PLAYBOOK_DIR / "qwen-dflash.yaml")
    with pytest.raises(InputError, match="--window"):
        alerts.rule_groups(book, window=bad)
    result = CliRunner().invoke(cli, ["alerts", "qwen-dflash", "--for", bad or "x"])
    assert result.exit_code == 2 and "expected a Prometheus duration" in result.output


def test_json_is_one_document_of_the_contract() -> None:
    result = CliRunner().invoke(cli, ["alerts", "qwen-dflash", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    Document.model_validate(document)
    assert (document["kind"], document["format"]) == ("Alerts", "prometheus")
    assert [g["name"] for g in document["groups"]] == [
        "orch-qwen-dflash-recording",
        "orch-qwen-dflash-alerts",
    ]


@needs_promtool
def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(rules(), encoding="utf-8")
    checked = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 6 rules found" in checked.stdout


def series(metric: str, instance: str, per_minute: float, **labels: str) -> dict[str, str]:
    """A counter of one engine of one server, growing `per_minute` for an hour."""
    names = {"model_name": MODEL, "instance": instance, "job": "vllm", "engine": "0", **labels}
    inside = ",".join(f'{k}="{v}"' for k, v in names.items())
    return {"series": f"{metric}{{{inside}}}", "values": f"0+{per_minute:g}x60"}


def server(instance: str, drafts: float, accepted: float, position1: float, engines: int = 1):
    """Counters of a server drafting `drafts` per minute, split over its engines."""
    found = []
    for engine in range(engines):
        share = {"engine": str(engine)}
        found += [
            series(alerts.DRAFTS, instance, drafts / engines, **share),
            series(alerts.ACCEPTED, instance, accepted / engines, **share),
            series(alerts.ACCEPTED_PER_POS, instance, position1 / engines, position="0", **share),
            series(alerts.GENERATION_TOKENS, instance, drafts + accepted, **share),
        ]
    return found


@needs_promtool
def test_prometheus_computes_the_gates_measure_and_alerts_on_the_bad_server(
    tmp_path: Path,
) -> None:
    """Prometheus's own rule engine (promtool test rules) on counters shaped as vLLM's:
    a healthy server on two engines (mean 1 + 300/100 = 4), one that drafts badly
    (1 + 50/100 = 1.5, position 1 at 0.1), one as bad with too few drafts to judge
    (10 per minute: 50 in 5 minutes < min_drafts 300), one generating without drafting."""
    text = rules()
    (tmp_path / "rules.yaml").write_text(text, encoding="utf-8")
    written = by_name(text)

    def fired(alertname: str, labels: dict[str, str], summary: str) -> dict:
        """The alert firing at 30 min for exactly the server with `labels`; promtool
        compares annotations whole: the summary as Prometheus renders it, the
        description as written with the model's name filled in."""
        description = written[alertname]["annotations"]["description"]
        annotations = {
            "summary": summary,
            "description": description.replace("{{ $labels.model_name }}", MODEL),
        }
        return {
            "eval_time": "30m",
            "alertname": alertname,
            "exp_alerts": [
                {"exp_labels": {"severity": "warning", **labels}, "exp_annotations": annotations}
            ],
        }

    labels = {"job": "vllm", "model_name": MODEL, "playbook": "qwen-dflash"}
    inactive = {"instance": "ct203:8000", "job": "vllm", "model_name": MODEL}
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    *server("ct200:8000", drafts=100, accepted=300, position1=80, engines=2),
                    *server("ct201:8000", drafts=100, accepted=50, position1=10),
                    *server("ct202:8000", drafts=10, accepted=5, position1=1),
                    series(alerts.GENERATION_TOKENS, "ct203:8000", 500),
                ],
                "promql_expr_test": [
                    {
                        "expr": LENGTH,
                        "eval_time": "30m",
                        "exp_samples": [
                            {"labels": _labels(LENGTH, "ct200:8000", labels), "value": 4},
                            {"labels": _labels(LENGTH, "ct201:8000", labels), "value": 1.5},
                            {"labels": _labels(LENGTH, "ct202:8000", labels), "value": 1.5},
                        ],
                    },
                    {
                        "expr": f'{CURVE}{{instance="ct200:8000"}}',
                        "eval_time": "30m",
                        "exp_samples": [
                            {
                                "labels": _labels(CURVE, "ct200:8000", {**labels, "position": "0"}),
                                "value": 0.8,
                            }
                        ],
                    },
                ],
                "alert_rule_test": [
                    {"eval_time": "10m", "alertname": "OrchAcceptanceLengthLow", "exp_alerts": []},
                    fired(
                        "OrchAcceptanceLengthLow",
                        {"instance": "ct201:8000", **labels},
                        "ct201:8000: mean acceptance length 1.50 < 2.5"
                        " (playbook qwen-dflash's gate)",
                    ),
                    fired(
                        "OrchPosition1AcceptanceLow",
                        {"instance": "ct201:8000", "position": "0", **labels},
                        "ct201:8000: position-1 acceptance 0.10 < 0.5"
                        " (playbook qwen-dflash's gate)",
                    ),
                    fired(
                        "OrchSpecDecodeInactive",
                        {"playbook": "qwen-dflash", **inactive},
                        "ct203:8000: generating tokens without drafting",
                    ),
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test), encoding="utf-8")
    done = subprocess.run(
        [str(PROMTOOL), "test", "rules", "test.yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _labels(record: str, instance: str, labels: dict[str, str]) -> str:
    inside = ",".join(f'{k}="{v}"' for k, v in sorted({"instance": instance, **labels}.items()))
    return f"{record}{{{inside}}}"
