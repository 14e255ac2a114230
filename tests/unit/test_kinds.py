"""Drafter kinds: the registry, each kind's launch, files and rules, and the shipped playbooks."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs, detect_kind, get_kind, kind_names
from orchestrator.drafters.profiles import get_profile, list_profiles, target_files
from orchestrator.errors import InputError
from orchestrator.inventory import load_inventory
from orchestrator.lab.acceptance import (
    eagle3_profile,
    expected_acceptance_length,
    mtp_profile,
    ngram_profile,
)
from orchestrator.lab.models import published_drafter_config
from orchestrator.plan import DRAFTER_CONFIG, LAUNCH_SCRIPT, TargetPlan, plan_deploy
from orchestrator.playbook import PLAYBOOK_DIR, load_playbook

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = ROOT / "inventories" / "example.yaml"
EAGLE3 = "RedHatAI/Qwen3-8B-speculator.eagle3"
MTP = "Qwen/Qwen3.6-27B:mtp"


def target(profile: str) -> dict:
    return json.loads(target_files(profile)["config.json"])


def summary(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.severity.value, f.field) for f in findings]


def plan(playbook: str, *assignments: str) -> TargetPlan:
    book = load_playbook(PLAYBOOK_DIR / f"{playbook}.yaml", list(assignments))
    return plan_deploy(book, load_inventory(EXAMPLE), ["ct129"])[0]


def speculative_config(launch: bytes, release_id: str = "RELEASE") -> dict:
    """The launch's speculative config as the shell passes it, serve.sh in `release_id`."""
    script = launch.decode().replace("\\\n", " ").replace('"$release"', release_id)
    words = shlex.split(script)
    return json.loads(words[words.index("--speculative-config") + 1])


# the registry


def test_every_kind_module_is_registered_by_itself() -> None:
    assert kind_names() == ["dflash", "draft_model", "eagle3", "mtp", "ngram"]
    assert all(get_kind(name).name == name for name in kind_names())


def test_an_unknown_kind_is_bad_input_listing_the_known_ones() -> None:
    with pytest.raises(InputError, match="unknown drafter kind 'medusa'; known kinds: dflash"):
        get_kind("medusa")


def test_a_playbook_naming_an_unknown_kind_points_at_the_field(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"drafter\.kind: unknown drafter kind 'eagle'"):
        load_playbook(PLAYBOOK_DIR / "qwen-dflash.yaml", ["drafter.kind=eagle"])


def test_a_config_is_recognised_by_its_kind() -> None:
    assert detect_kind(get_profile("z-lab/Qwen3.6-27B-DFlash").config).name == "dflash"
    assert detect_kind(get_profile(EAGLE3).config).name == "eagle3"
    assert detect_kind({"architectures": ["LlamaForCausalLM"]}).name == "dflash"  # the default


def test_every_profile_names_a_registered_kind_and_lists_by_it() -> None:
    kinds = {p.kind for p in list_profiles()}
    assert {"dflash", "eagle3", "mtp"} <= kinds <= set(kind_names())


# launches and files per kind


@pytest.mark.parametrize("path", sorted(PLAYBOOK_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_playbook_launches_its_kinds_method(path: Path) -> None:
    book = load_playbook(path)
    for each in plan_deploy(book, load_inventory(EXAMPLE)):
        launch = speculative_config(each.files[LAUNCH_SCRIPT], each.release_id)
        assert launch["method"] == book.drafter.kind
        assert launch["num_speculative_tokens"] == book.server.num_speculative_tokens
        assert launch.get("model") == each.drafter_dir
        assert each.findings == []


def test_a_shipped_config_is_loaded_from_the_drafter_dir_and_nothing_is_rendered() -> None:
    eagle = plan("qwen3-8b-eagle3")
    assert eagle.drafter_config is None
    assert set(eagle.files) == {LAUNCH_SCRIPT}
    assert eagle.drafter_dir == "/opt/models/Qwen3-8B-speculator.eagle3"
    assert eagle.read_back_files == eagle.files


def test_dflash_with_a_shipped_config_uses_the_drafters_own() -> None:
    shipped = plan("qwen3-8b-dflash", "drafter.config=shipped")
    assert DRAFTER_CONFIG not in shipped.files
    assert speculative_config(shipped.files[LAUNCH_SCRIPT])["model"] == (
        "/opt/models/Qwen3-8B-DFlash-b16"
    )


def test_mtp_and_ngram_load_no_drafter_dir() -> None:
    mtp = plan("qwen-mtp")
    assert (mtp.drafter_dir, set(mtp.files)) == (None, {LAUNCH_SCRIPT})
    assert speculative_config(mtp.files[LAUNCH_SCRIPT]) == {
        "method": "mtp",
        "num_speculative_tokens": 1,
    }
    ngram = plan("qwen-mtp", "drafter.kind=ngram", "drafter.profile=null")
    assert speculative_config(ngram.files[LAUNCH_SCRIPT])["method"] == "ngram"


@pytest.mark.parametrize(
    ("playbook", "assignments", "message"),
    [
        ("qwen-mtp", ["drafter.weights=/opt/models/x"], "loads no drafter directory"),
        ("qwen3-8b-eagle3", ["drafter.weights=null"], "is a model directory"),
        ("qwen3-8b-eagle3", ["drafter.config=rendered"], "renders no config; use shipped"),
        ("qwen3-8b-eagle3", ["drafter.overrides={a: 1}"], "apply to a rendered config"),
        ("qwen3-8b-dflash", [f"drafter.profile={EAGLE3}"], "is a eagle3 drafter, not"),
    ],
)
def test_a_kind_refuses_what_it_cannot_use(
    playbook: str, assignments: list[str], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        plan(playbook, *assignments)


# draft_model, ngram (eagle3 and mtp: tests/test_eagle3.py, tests/test_mtp.py)


def test_a_draft_model_must_share_the_targets_vocabulary() -> None:
    qwen3 = target(EAGLE3)
    small = {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024}
    assert get_kind("draft_model").check(CheckInputs(small, qwen3)) == []
    llama = {"model_type": "llama", "vocab_size": 128256}
    assert summary(get_kind("draft_model").check(CheckInputs(llama, qwen3))) == [
        ("error", "vocab_size"),
        ("warning", "model_type"),
    ]


def test_ngram_needs_nothing_and_finds_nothing() -> None:
    assert get_kind("ngram").check(CheckInputs({}, target(MTP))) == []
    assert get_kind("ngram").speculative_config(None, 4) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
    }


# the CLI


# the lab's acceptance model per kind


def test_the_lab_accepts_each_kinds_published_setup_and_not_its_misconfiguration() -> None:
    head = published_drafter_config(EAGLE3)
    qwen3, qwen36 = target(EAGLE3), target(MTP)
    assert eagle3_profile(head, head, qwen3, 3) == [0.75, 0.6, 0.5]
    assert expected_acceptance_length(eagle3_profile(head, head, qwen3, 3), 3) > 2.0
    for wrong_target, truth in ((qwen36, head), (qwen3, None)):
        assert eagle3_profile(head, truth, wrong_target, 3)[0] < 0.1
    assert expected_acceptance_length(mtp_profile(qwen36, 1), 1) == pytest.approx(1.85)
    assert mtp_profile(qwen3, 1)[0] < 0.1
    assert expected_acceptance_length(ngram_profile(4), 4) < 2.0
