"""The server check's kept verdict: reused for the same launch on the same install, checked
again for any change of either, with --recheck, and never for a refusal. Preflight's one
round trip is answered in memory (the script itself runs in tests/local)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.container import validator, verdict
from orchestrator.container.probe import TARGET
from orchestrator.inventory import load_inventory
from orchestrator.plan import TargetPlan, plan_deploy
from orchestrator.playbook import load_playbook
from orchestrator.preflight import Facts, gather, verdict_to_keep
from orchestrator.transport.memory import MemoryTransport, reply

ROOT = Path(__file__).resolve().parent.parent.parent
INSTALL = b"/opt/vllm/lib/python3.12/site-packages/vllm-0.32.0.dist-info/RECORD 91234 1764800000\n"
CONFIG = json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}).encode()


def plan_of(*assignments: str) -> TargetPlan:
    playbook = load_playbook(ROOT / "playbooks" / "qwen-dflash.yaml", list(assignments))
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    [ct129] = plan_deploy(playbook, inventory, ["ct129"])
    return ct129


def stage(name: str, status: str = "ok") -> dict:
    return {"name": name, "status": status, "detail": "", "seconds": 0.1}


PASSED = json.dumps(
    {"version": "0.32.0", "stages": [stage("parser"), stage("environment")], "seconds": 18.0}
).encode()
REFUSED = json.dumps(
    {"version": "0.32.0", "stages": [stage("parser", "error")], "seconds": 11.0}
).encode()


def frames(named: dict[str, bytes]) -> bytes:
    return b"".join(f"{k} {len(v)}\n".encode() + v for k, v in named.items())


def facts_reply(install: bytes, kept: bytes | None, config: bytes = CONFIG) -> bytes:
    """preflight_facts's frames: a running server of ours (no port probe), the target's
    config.json, no drafter dir, the install's identity and the kept verdict."""
    named = {
        "gpus": b"0, GPU-a, 49140, 100, 49040, NVIDIA RTX A6000\n",
        "gpus.rc": b"0",
        "apps": b"",
        "apps.rc": b"0",
        "disk": b"500000000",
        "server": b"running 4242\n",
        "current": b"",
        f"{TARGET}.listing": f"{len(config)} config.json\n".encode(),
        f"{TARGET}config.json": config,
        "drafter/.missing": b"",
        verdict.INSTALL: install,
    }
    if kept is not None:
        named[verdict.VERDICT] = kept
    return frames(named)


def run(
    plan: TargetPlan,
    kept: bytes | None = None,
    install: bytes = INSTALL,
    answer: bytes = PASSED,
    recheck: bool = False,
    config: bytes = CONFIG,
) -> tuple[Facts, MemoryTransport]:
    transport = (
        MemoryTransport()
        .on("preflight_facts", reply(facts_reply(install, kept, config)))
        .on("validate_launch", reply(answer))
    )
    return gather(transport, plan, "nvidia-smi", recheck), transport


def checks(transport: MemoryTransport) -> int:
    """How many times the target's vLLM was asked."""
    return sum(validator.FIND_PYTHON in call.argv for call in transport.calls)


def kept_after(plan: TargetPlan, install: bytes = INSTALL) -> bytes:
    """The record a deploy keeps after a check that ran and passed."""
    facts, transport = run(plan, install=install)
    assert checks(transport) == 1 and not facts.server_check.reused  # type: ignore[union-attr]
    made = verdict_to_keep(facts, "run-1", "2026-12-04T18:00:00+00:00")
    assert made is not None
    return verdict.record(made)


def test_the_same_launch_on_the_same_install_reuses_the_verdict_and_says_from_when() -> None:
    plan = plan_of()
    facts, transport = run(plan, kept_after(plan))
    assert checks(transport) == 0
    assert facts.server_check is not None and facts.server_check.passed
    assert facts.server_check.reused == "2026-12-04T18:00:00+00:00 (run run-1)"
    assert facts.server_version == "0.32.0"
    assert verdict_to_keep(facts, "run-2", "later") is None, "a reused verdict is not kept anew"


def test_one_round_trip_reads_every_fact_when_the_verdict_holds() -> None:
    plan = plan_of()
    _, transport = run(plan, kept_after(plan))
    assert len(transport.calls) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"plan": ("server.max_model_len=4096",)},
        {"install": INSTALL.replace(b"1764800000", b"1764900000")},
        {"config": CONFIG.replace(b"qwen3", b"qwen3_moe")},
        {"recheck": True},
    ],
    ids=["another launch", "vllm reinstalled", "the target's config changed", "--recheck"],
)
def test_any_change_of_launch_install_or_model_files_checks_again(change: dict) -> None:
    kept = kept_after(plan_of())
    plan = plan_of(*change.pop("plan", ()))
    facts, transport = run(plan, kept, **change)
    assert checks(transport) == 1
    assert facts.server_check is not None and not facts.server_check.reused


def test_a_refusal_is_never_kept_nor_reused() -> None:
    plan = plan_of()
    facts, _ = run(plan, answer=REFUSED)
    assert facts.server_check is not None and not facts.server_check.passed
    assert verdict_to_keep(facts, "run-1", "now") is None
    assert facts.verdict_key is not None
    forged = verdict.Verdict.model_validate_json(kept_after(plan)).model_copy(
        update={"reply": verdict.Reply.model_validate_json(REFUSED)}
    )
    facts, transport = run(plan, verdict.record(forged))
    assert checks(transport) == 1


def test_an_install_without_identity_is_checked_every_time_and_nothing_is_kept() -> None:
    plan = plan_of()
    facts, _ = run(plan, install=b"")
    assert facts.verdict_key is None and verdict_to_keep(facts, "run-1", "now") is None


@pytest.mark.parametrize("raw", [b"", b"{", b'{"key": 1}', b"[]"])
def test_an_unreadable_record_means_a_check(raw: bytes) -> None:
    facts, transport = run(plan_of(), raw)
    assert checks(transport) == 1 and facts.server_check is not None
