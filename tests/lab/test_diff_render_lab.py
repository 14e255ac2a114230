"""What a deploy would change and what it writes, on the lab: dry-run exit codes, diffs
that read like `diff -u`, and `render --output` against the files a deploy writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from labtools import FAST, LabHandle
from orchrun import ROOT

pytestmark = pytest.mark.lab

SHORTER = ["--set", "server.max_model_len=16384"]


def target(document: dict, name: str) -> dict:
    return next(t for t in document["targets"] if t["name"] == name)


def test_dry_run_exit_codes_diffs_and_rendered_files_match_the_deploy(
    lab: LabHandle, tmp_path: Path
) -> None:
    inventory = str(lab.inventory)
    deploy = ["deploy", "qwen-dflash", "-i", inventory, *FAST]

    # A missing model dir fails the dry run (exit 1), and the target says how many errors.
    missing = lab.orch(
        *deploy, "--limit", "ct200", "--dry-run", "--json", "--set", "target.path=/no/such/model"
    )
    assert missing.code == 1, missing.stderr
    entry = target(missing.json, "ct200")
    errors = [f for f in entry["findings"] if f["severity"] == "error"]
    assert entry["result"] == "dry_run" and errors
    assert entry["error"].startswith(f"preflight found {len(errors)} error(s); ")
    assert missing.json["result"] != "ok"

    # Before anything is deployed a clean dry run passes and every file is new.
    clean = lab.orch(*deploy, "--dry-run", "--diff")
    assert clean.code == 0, str(clean)
    for name in ("ct200", "ct201"):
        releases = re.escape(f"{name}:{lab.deployment_dir(name)}/releases/")
        written = rf"\+\+\+ {releases}[0-9a-f]{{12}}/serve\.sh \(new\)"
        assert re.search(rf"^--- /dev/null\n{written}\n@@ -0,0 \+1,\d+ @@$", clean.stdout, re.M)

    # `render --output` writes what the deploy then writes, byte for byte.
    out = tmp_path / "rendered"
    rendered = lab.orch("render", "qwen-dflash", "-i", inventory, "--output", str(out))
    assert rendered.code == 0, str(rendered)
    first = lab.orch(*deploy, "--json")
    assert first.code == 0, str(first)
    for name in ("ct200", "ct201"):  # one reached by pct, one by its own sshd
        release = lab.deployment_dir(name) / "releases" / target(first.json, name)["release"]
        for file in ("config.json", "serve.sh"):
            assert (out / name / file).read_bytes() == (release / file).read_bytes()
            assert (out / name / file).stat().st_mode == (release / file).stat().st_mode
        assert subprocess.run(["sh", "-n", str(out / name / "serve.sh")]).returncode == 0
        json.loads((out / name / "config.json").read_text())

    # The dry-run diff: current (---) against new (+++), under the container, whole lines
    # even on a 40-column terminal; nothing is written.
    old = target(first.json, "ct200")["release"]
    ct200 = lab.deployment_dir("ct200")
    narrow = LabHandle(lab.lab, {**lab.env, "COLUMNS": "40"})
    dry = narrow.orch(*deploy, "--limit", "ct200", "--dry-run", "--diff", *SHORTER)
    assert dry.code == 0, str(dry)
    lines = dry.stdout.splitlines()
    assert f"--- ct200:{ct200}/releases/{old}/serve.sh (current)" in lines
    [new_header] = [line for line in lines if line.endswith("/serve.sh (new)")]
    header = re.fullmatch(
        rf"\+\+\+ ct200:{re.escape(str(ct200))}/releases/([0-9a-f]{{12}})/serve\.sh \(new\)",
        new_header,
    )
    assert header and header[1] != old
    new = header[1]
    assert "-  --max-model-len 32768 \\" in lines and "+  --max-model-len 16384 \\" in lines
    # the release id is in no file (serve.sh reads it from its own path): one changed line
    assert [line for line in lines if re.match(r"[-+](?![-+]{2} )", line)] == [
        "-  --max-model-len 32768 \\",
        "+  --max-model-len 16384 \\",
    ]
    assert [p.name for p in (ct200 / "releases").iterdir()] == [old]

    # On a real deploy --diff is shown before the old server stops (ct200, as people see it)
    # and recorded in the JSON (ct201, at the same time).
    shown = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *deploy, "--limit", "ct200", "--diff", *SHORTER],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=lab.env,
        cwd=ROOT,
    )
    recorded = lab.orch(*deploy, "--limit", "ct201", "--diff", "--json", *SHORTER)
    output, _ = shown.communicate(timeout=300)
    assert shown.returncode == 0, output
    assert output.index("+  --max-model-len 16384 \\") < output.index("ct200: stop server")
    assert (ct200 / "current").readlink() == Path("releases") / new
    assert recorded.code == 0, str(recorded)
    entry = target(recorded.json, "ct201")
    assert entry["result"] == "deployed"
    assert "-  --max-model-len 32768 \\\n" in entry["diff"]
    assert f"+++ ct201:{lab.deployment_dir('ct201')}/releases/{entry['release']}/" in entry["diff"]


def test_orch_diff_is_a_patch_on_stdout_and_says_by_its_exit_whether_anything_would_change(
    deployed_lab: LabHandle, tmp_path: Path
) -> None:
    """As `kubectl diff`: stdout one unified patch of every container and nothing else
    (GNU patch turns the current files into the rendered ones with it), the summary on
    stderr, exit 0 when nothing would change, 1 when something would, 2 on an error."""
    lab, inventory = deployed_lab, str(deployed_lab.inventory)
    same = lab.orch("diff", "qwen-dflash", "-i", inventory)
    assert (same.code, same.stdout) == (0, ""), same.stderr
    assert "qwen-dflash run " in same.stderr  # the summary, beside the progress

    changed = lab.orch("diff", "qwen-dflash", "-i", inventory, *SHORTER)
    assert changed.code == 1, changed.stderr
    patch = changed.stdout
    assert "CONTAINER" not in patch and "run log" not in patch
    assert all(re.match(r"(--- |\+\+\+ |@@ | |-|\+)", line) for line in patch.splitlines())
    removed = [line for line in patch.splitlines() if re.match(r"-(?!--)", line)]
    added = [line for line in patch.splitlines() if re.match(r"\+(?!\+\+)", line)]
    assert removed == ["-  --max-model-len 32768 \\"] * 2  # one field: one line a container
    assert added == ["+  --max-model-len 16384 \\"] * 2

    work = tmp_path / "work"
    for name in ("ct200", "ct201"):
        current = (lab.deployment_dir(name) / "current").resolve()
        copy = work / f"{name}:{current}"  # the patch's names, relative to work/
        copy.mkdir(parents=True)
        for file in ("config.json", "serve.sh"):
            (copy / file).write_bytes((current / file).read_bytes())
    applied = subprocess.run(
        ["patch", "-p0", "-d", str(work)], input=patch, text=True, capture_output=True
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    rendered = tmp_path / "rendered"
    made = lab.orch("render", "qwen-dflash", "-i", inventory, *SHORTER, "--output", str(rendered))
    assert made.code == 0, str(made)
    for name in ("ct200", "ct201"):
        current = (lab.deployment_dir(name) / "current").resolve()
        for file in ("config.json", "serve.sh"):
            patched = work / f"{name}:{current}" / file
            assert patched.read_bytes() == (rendered / name / file).read_bytes()

    broken = lab.orch("diff", "qwen-dflash", "-i", inventory, "--set", "target.path=/no/such")
    assert broken.code == 2, broken.stderr  # preflight found an error: an error here
    bad = lab.orch("diff", "qwen-dflash", "-i", str(tmp_path / "none.yaml"), "--json")
    assert bad.code == 2 and bad.json["kind"] == "Error"

    # deploy --dry-run --diff keeps its exit codes; its summary is on stderr too
    dry = lab.orch("deploy", "qwen-dflash", "-i", inventory, "--dry-run", "--diff", *SHORTER)
    assert dry.code == 0, str(dry)
    assert dry.stdout == patch and "qwen-dflash run " in dry.stderr
