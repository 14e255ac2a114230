"""Planning a deploy: release ids, the rendered drafter config, the launch script, bad fields."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jinja2
import pytest
import yaml
from examples import EXAMPLE, PLAYBOOK, plans

from orchestrator.drafters.kinds.dflash.drafter import IDS
from orchestrator.drafters.profiles import get_profile
from orchestrator.errors import InputError
from orchestrator.inventory import load_inventory
from orchestrator.plan import DRAFTER_CONFIG, LAUNCH_SCRIPT, plan_deploy
from orchestrator.playbook import load_playbook
from orchestrator.render import TEMPLATE_DIR, environment

PUBLISHED = (
    Path(__file__).parent.parent / "fixtures" / "drafters" / "z-lab_Qwen3.6-27B-DFlash.config.json"
)
QWEN36 = "z-lab/Qwen3.6-27B-DFlash"


def test_no_file_of_a_release_holds_its_id_so_one_field_is_one_line() -> None:
    """serve.sh reads its release from its own directory: a one-field change is a
    one-line diff, and the release id is in no file's content (only in its path)."""
    base, changed = plans()["ct200"], plans("server.max_model_len=16384")["ct200"]
    assert base.release_id != changed.release_id
    for plan in (base, changed):
        assert all(plan.release_id.encode() not in data for data in plan.files.values())
    old, new = (p.files[LAUNCH_SCRIPT].decode().splitlines() for p in (base, changed))
    assert [(a, b) for a, b in zip(old, new, strict=True) if a != b] == [
        ("  --max-model-len 32768 \\", "  --max-model-len 16384 \\")
    ]
    assert base.files[DRAFTER_CONFIG] == changed.files[DRAFTER_CONFIG]


def test_release_ids_are_stable_and_differ_between_containers() -> None:
    first, second = plans(), plans()

    assert {n: p.release_id for n, p in first.items()} == {
        n: p.release_id for n, p in second.items()
    }
    assert all(re.fullmatch(r"[0-9a-f]{12}", p.release_id) for p in first.values())
    assert first["ct129"].release_id != first["ct200"].release_id
    assert first["ct129"].files == second["ct129"].files


@pytest.mark.parametrize(
    "assignment",
    [
        "server.port=8001",
        "server.num_speculative_tokens=8",
        "server.tensor_parallel_size=1",
        "server.max_model_len=8192",
        "server.attention_backend=FLASH_ATTN",
        "server.extra_args=[--enforce-eager]",
        "server.env={VLLM_LOGGING_LEVEL: DEBUG}",
        "server.vllm=/opt/other/bin/vllm",
        "server.host=127.0.0.1",
        "target.path=/opt/models/other",
        "target.served_name=other",
        "drafter.weights=/opt/models/other-drafter",
        "drafter.overrides.block_size=8",
        "drafter.overrides.dflash_config.mask_token_id=248064",
        "state_dir=/srv/orch",
    ],
)
def test_every_input_of_a_release_changes_its_id(assignment: str) -> None:
    base, changed = plans()["ct129"], plans(assignment)["ct129"]
    assert changed.release_id != base.release_id
    differs = ("files", "deployment_dir", "drafter_weights")  # the weights: the drafter view
    assert any(getattr(changed, name) != getattr(base, name) for name in differs)


@pytest.mark.parametrize(
    "assignment",
    ["gate.min_drafts=999", "rollout.parallel=2", "releases_kept=9", "drafter.overrides={}"],
)
def test_what_does_not_go_into_a_release_keeps_its_id(assignment: str) -> None:
    base, same = plans()["ct129"], plans(assignment)["ct129"]
    assert (same.release_id, same.files) == (base.release_id, base.files)


def test_auto_plans_both_launches_the_release_of_each_source_would_be() -> None:
    """`gate.acceptance_source: auto` (the default) is the per-request plan, carrying the
    counters one for a vLLM without the flag: the same releases as asking for each."""
    auto = plans()["ct129"]
    per_request = plans("gate.acceptance_source=per_request")["ct129"]
    counters = plans("gate.acceptance_source=counters")["ct129"]

    assert (auto.release_id, auto.files) == (per_request.release_id, per_request.files)
    assert auto.counters_plan is not None
    assert (auto.counters_plan.release_id, auto.counters_plan.files) == (
        counters.release_id,
        counters.files,
    )
    assert b"--per-request-spec-decode-metrics" in auto.files[LAUNCH_SCRIPT]
    assert b"--per-request-spec-decode-metrics" not in auto.counters_plan.files[LAUNCH_SCRIPT]
    assert per_request.counters_plan is None and counters.counters_plan is None


def test_an_inventory_var_changes_the_release_of_the_containers_that_use_it(
    tmp_path: Path,
) -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["containers"]["ct200"]["vars"]["vllm"] = "/opt/vllm-next/bin/vllm"
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(document))

    base, changed = plans(), plans(inventory=inventory)

    assert changed["ct129"].release_id == base["ct129"].release_id
    assert changed["ct200"].release_id != base["ct200"].release_id
    assert changed["ct200"].vllm == "/opt/vllm-next/bin/vllm"


def test_an_edited_launch_template_changes_the_release_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATE_DIR, templates)
    serve = templates / "vllm" / "serve.sh.j2"
    serve.write_text(serve.read_text().replace("exec ", "ulimit -n 65536\nexec ", 1))
    base = plans()["ct129"]
    monkeypatch.setattr(environment(TEMPLATE_DIR), "loader", jinja2.FileSystemLoader(templates))

    edited = plans()["ct129"]

    assert b"ulimit -n 65536\n" in edited.files[LAUNCH_SCRIPT]
    assert edited.release_id != base.release_id


def test_the_rendered_config_is_the_published_one_with_the_window_the_server_needs() -> None:
    rendered = {**json.loads(PUBLISHED.read_text()), "use_sliding_window": True}
    assert get_profile(QWEN36).config == rendered
    for plan in plans().values():
        assert json.loads(plan.files[DRAFTER_CONFIG]) == rendered
        assert plan.drafter_config == rendered
        assert plan.findings == []


def test_set_overrides_reach_the_config_and_the_launch_script() -> None:
    plan = plans(
        "drafter.overrides.dflash_config.target_layer_ids=[1,17,33,49,63]", "server.port=8001"
    )["ct129"]

    config = json.loads(plan.files[DRAFTER_CONFIG])
    published = get_profile(QWEN36).config["dflash_config"]
    assert config["dflash_config"] == {**published, "target_layer_ids": [1, 17, 33, 49, 63]}
    assert plan.drafter_config == config
    assert [(f.severity.value, f.field) for f in plan.findings if f.field == IDS] == [
        ("error", IDS)
    ]
    assert plan.port == 8001
    assert b"  --port 8001 \\\n" in plan.files[LAUNCH_SCRIPT]


def test_paths_and_release_dirs_come_from_each_containers_vars() -> None:
    ct129, ct200 = plans()["ct129"], plans()["ct200"]
    assert (ct129.target_dir, ct200.target_dir) == (
        "/opt/models/Qwen3.6-27B",
        "/dev/shm/models/Qwen3.6-27B",
    )
    assert ct200.drafter_weights == "/dev/shm/models/Qwen3.6-27B-DFlash"
    assert ct129.deployment_dir == "/var/lib/orch/qwen-dflash"
    assert ct129.release_dir == f"/var/lib/orch/qwen-dflash/releases/{ct129.release_id}"
    assert ct129.drafter_view == f"{ct129.release_dir}/drafter"
    assert (ct129.address, ct129.host, ct200.host) == ("192.0.2.129", "kpro5", "pve-train")


def test_limit_plans_only_the_chosen_containers() -> None:
    playbook = load_playbook(PLAYBOOK)
    [only] = plan_deploy(playbook, load_inventory(EXAMPLE), ["ct200"])
    assert only.container == "ct200"


@pytest.mark.parametrize(
    ("assignment", "field", "problem"),
    [
        ("target.path=models/Qwen3.6-27B", "target.path", "is not an absolute path"),
        ("state_dir=var/lib/orch", "state_dir", "is not an absolute path"),
        ("server.vllm=vllm", "server.vllm", "is not an absolute path"),
        ("target.path='{{ models_dir }}/x'", "target.path", "'models_dir' is undefined"),
        ("server.host='{{ container.ip }}'", "server.host", "has no attribute 'ip'"),
        ('target.path="/opt/a\\nb"', "target.path", "contains a line break or NUL"),
    ],
)
def test_a_bad_field_is_an_input_error_naming_it(assignment: str, field: str, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        plans(assignment)
    message = str(caught.value)
    assert message.startswith(f"{PLAYBOOK}: {field} for ct129: ")
    assert problem in message


def test_vars_the_inventory_lacks_are_one_error_per_container_saying_where_to_set_them() -> None:
    """Each container: at its place in the inventory, each var with the playbook fields
    (and lines) that use it, and where to set it (the container's vars, or defaults)."""
    with pytest.raises(InputError) as caught:
        plans("drafter.weights='{{ vars.nope }}/x'", "target.path='{{ vars.nope }}/y'")
    ct129, ct200 = str(caught.value).splitlines()
    uses = "(nope: drafter.weights (--set drafter.weights), target.path (--set target.path))"
    assert ct129 == (
        f"{EXAMPLE}:22:3: containers.ct129.vars: no nope, which {PLAYBOOK} uses {uses}; set it "
        f"under containers.ct129.vars (containers.ct129 is at {EXAMPLE}:22:3), or for every "
        f"container under defaults.vars ({EXAMPLE}:8:3)"
    )
    assert ct200.startswith(f"{EXAMPLE}:40:5: containers.ct200.vars: no nope, which ")
    assert f"set it under containers.ct200.vars ({EXAMPLE}:40:5), or " in ct200
