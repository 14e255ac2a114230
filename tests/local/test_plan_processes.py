"""plan: the cases that run a real process (a shell, the CLI or a script); the
rest are unit tests in tests/unit/test_plan.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from examples import plans

from orchestrator.plan import LAUNCH_SCRIPT
from orchestrator.serving.judge import read_launch

ROOT = Path(__file__).resolve().parent.parent.parent
PLAYBOOK = ROOT / "playbooks" / "qwen-dflash.yaml"
EXAMPLE = ROOT / "inventories" / "example.yaml"
PUBLISHED = (
    Path(__file__).parent.parent / "fixtures" / "drafters" / "z-lab_Qwen3.6-27B-DFlash.config.json"
)
QWEN36 = "z-lab/Qwen3.6-27B-DFlash"


def test_the_launch_script_runs_vllm_with_exactly_the_planned_arguments(tmp_path: Path) -> None:
    fake_vllm = tmp_path / "bin dir" / "vllm"
    fake_vllm.parent.mkdir()
    fake_vllm.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        'print(json.dumps({"argv": sys.argv[1:], "env": os.environ.get("ODD")}))\n'
    )
    fake_vllm.chmod(0o755)
    target = "/models/it's a $(touch pwned) `dir`"
    plan = plans(
        f"server.vllm={json.dumps(str(fake_vllm))}",
        f"target.path={json.dumps(target)}",
        "server.env={ODD: \"a 'b' $(c) `d`\"}",
        "server.extra_args=['--x=1 2']",
    )["ct129"]
    # In its release's directory, run through a `current` link: the script takes its
    # release's id from where it is (no file of the release holds it).
    script = tmp_path / "releases" / plan.release_id / LAUNCH_SCRIPT
    script.parent.mkdir(parents=True)
    script.write_bytes(plan.files[LAUNCH_SCRIPT])
    (tmp_path / "current").symlink_to(f"releases/{plan.release_id}")
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    done = subprocess.run(
        ["/bin/sh", str(tmp_path / "current" / LAUNCH_SCRIPT)],
        capture_output=True,
        cwd=cwd,
        timeout=30,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout)
    assert ran["env"] == "a 'b' $(c) `d`"
    argv = ran["argv"]
    assert json.loads(argv[3]) == {
        "method": "dflash",
        "model": f"{plan.release_dir}/drafter",
        "num_speculative_tokens": 15,
    }
    assert argv[:3] + argv[4:] == [
        "serve",
        target,
        "--speculative-config",
        "--served-model-name",
        "qwen3.6-27b",
        "--host",
        "192.0.2.129",
        "--port",
        "8000",
        "--max-model-len",
        "32768",
        "--per-request-spec-decode-metrics",
        "summary",
        "--x=1 2",
        "--tensor-parallel-size",
        "2",
    ]
    assert list(cwd.iterdir()) == []
    # What the server's dry run reads from the script is what the shell ran.
    launch = read_launch(plan.files[LAUNCH_SCRIPT].decode(), plan.release_id)
    assert (launch.executable, list(launch.argv)) == (str(fake_vllm), argv)
    assert launch.env == {"ODD": ran["env"]}
