"""The transaction's bodies (deploy, rollback, recovery, --replace, stop/start/restart/
remove) on a scripted container through the in-memory transport, as tables: the
container's facts in, the outcome and the container's state out. The gate is scripted
per release (tests/scripted.py ScriptedGate); everything else runs as in a real run."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from clocks import FakeClock
from scripted import ScriptedContainer, ScriptedGate, frames

from orchestrator.cancel import Cancel
from orchestrator.container.lock import Owner
from orchestrator.container.pause import Decision
from orchestrator.container.validator import FIND_PYTHON
from orchestrator.contract import jsonable
from orchestrator.inventory import load_inventory
from orchestrator.lab.models import published_drafter_config, write_dflash_dir, write_target_dir
from orchestrator.plan import TargetPlan, plan_deploy
from orchestrator.playbook import load_playbook
from orchestrator.probes.context import ContextBucket
from orchestrator.release import GateTarget
from orchestrator.serving.acceptance_source import auto_source
from orchestrator.transaction.actions import Action, ServerActionRun
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.options import Options
from orchestrator.transaction.outcome import Outcome, Restored, StayedStopped
from orchestrator.transaction.target import TargetRun
from orchestrator.transport.base import Result

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "qwen-dflash.yaml"
EXAMPLE = ROOT / "inventories" / "example.yaml"
BUCKETS = [ContextBucket("short", 0, None, ("hello",))]
OLD, OLDER, MID = "aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"
NEW = "NEW"
"""Stands for the playbook's own release id in the tables."""


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    write_target_dir(root / "target", "Qwen3.6-27B")
    write_dflash_dir(root / "drafter", published_drafter_config("z-lab/Qwen3.6-27B-DFlash"))
    return {"target": root / "target", "drafter": root / "drafter"}


class Site:
    """One playbook's deployment on one scripted container, its gate scripted."""

    def __init__(self, models: dict[str, Path], *assignments: str) -> None:
        self.models = models
        self.playbook = load_playbook(PLAYBOOK, list(assignments))
        self.plan: TargetPlan = plan_deploy(self.playbook, load_inventory(EXAMPLE))[0]
        self.container = ScriptedContainer(self.plan.container, self.plan.layout)
        self.container.models[self.plan.target_dir] = models["target"]
        if self.plan.drafter_weights:
            self.container.models[self.plan.drafter_weights] = models["drafter"]
        self.container.transport.on_http("GET", "/health", lambda _: (200, b""))
        self.container.transport.on_http("POST", "/v1/completions", lambda _: (200, b"{}"))
        self.gate = ScriptedGate(self.container)
        self.clock = FakeClock()
        """The settle after a passed gate watches the server in this clock's time."""
        self.cancel = Cancel()
        self.neighbours: dict[str, Deployment] = {}

    @property
    def new(self) -> str:
        return self.plan.release_id

    def rid(self, name: str | None) -> str | None:
        return self.new if name == NEW else name

    def kept(self, release_id: str, files: dict[str, bytes] | None = None) -> None:
        """An earlier release on the container, its manifest recording its gate settings."""
        manifest = {
            "release_id": release_id,
            "run_id": f"run-{release_id[:3]}",
            "files": {n: hashlib.sha256(d).hexdigest() for n, d in (files or {}).items()},
            "gate_target": jsonable(GateTarget.of(self.playbook)),
        }
        self.container.release(
            release_id, {**(files or {}), "manifest.json": json.dumps(manifest).encode()}
        )

    def on(self, current: str | None, running: bool = True, previous: str | None = None) -> None:
        c = self.container
        for rid in filter(None, (current, previous)):
            if rid != self.new and f"{c.layout.release(rid)}/manifest.json" not in c.files:
                self.kept(rid)
        if current:
            c.links[c.layout.current] = f"releases/{self.rid(current)}"
        if previous:
            c.links[c.layout.previous] = f"releases/{self.rid(previous)}"
        c.server = 4242 if running and current else None

    def deployment(self, **options: Any) -> Deployment:
        return Deployment(
            self.plan,
            self.container.transport,
            self.playbook,
            BUCKETS,
            "nvidia-smi",
            Options(run_id="run-now", user="ops", **options),
            cancel=self.cancel,
            neighbours=self.neighbours.get,
            run_gate=self.gate,
            clock=self.clock,
        )

    def deploy(self, **options: Any) -> Outcome:
        return TargetRun(self.deployment(**options)).deploy()

    def rollback(self, to: str | None = None, **options: Any) -> Outcome:
        return TargetRun(self.deployment(**options)).rollback(to)

    def act(self, action: Action) -> Outcome:
        return ServerActionRun(self.deployment()).act(action)

    def link(self, which: str) -> str | None:
        target = self.container.links.get(getattr(self.container.layout, which))
        return target.rsplit("/", 1)[-1] if target else None

    def audit(self) -> list[tuple[str, str]]:
        raw = self.container.files.get(self.container.layout.audit_log, b"")
        return [(a["action"], a["result"]) for a in map(json.loads, raw.splitlines())]

    def journal(self, **fields: Any) -> None:
        """A journal left by a run that died in its switch."""
        record = {
            "run_id": "run-dead",
            "owner": "ops@elsewhere pid 1",
            "started": "t0",
            "updated": "t1",
            "replaced": None,
        }
        self.container.files[self.container.layout.journal] = json.dumps(
            {**record, **fields}
        ).encode()


@dataclass(frozen=True)
class Expect:
    result: str
    exit_code: int
    current: str | None
    running: bool
    audit: list[tuple[str, str]] = field(default_factory=list)
    previous: str | bool | None = False
    """The `previous` link afterwards (False: not checked)."""


def check(site: Site, outcome: Outcome, expect: Expect) -> None:
    assert (outcome.result, outcome.exit_code) == (expect.result, expect.exit_code), outcome.error
    assert site.link("current") == site.rid(expect.current)
    assert outcome.current == site.rid(expect.current)
    assert (site.container.server is not None) is expect.running
    assert site.audit() == expect.audit
    if expect.previous is not False:
        assert site.link("previous") == site.rid(expect.previous)  # type: ignore[arg-type]
    assert site.container.layout.journal not in site.container.files
    assert site.container.layout.lock_owner not in site.container.files


# -- deploy --------------------------------------------------------------------------------------


Setup = Callable[[Site], None]


def fresh(site: Site) -> None:
    return None


def running_old(site: Site) -> None:
    site.on(OLD, previous=OLDER)


def stopped_old(site: Site) -> None:
    site.on(OLD, running=False)


def one_gpu(site: Site) -> None:
    site.container.gpus = "0, GPU-a, 49140, 100, 49040, NVIDIA RTX A6000\n"
    site.on(OLD)


def deployed(site: Site) -> None:
    """The playbook's release deployed over OLD by an earlier run."""
    site.on(OLD)
    assert site.deploy().result == "deployed"


def deployed_with_other_gate(site: Site) -> None:
    """As `deployed`, by a run whose playbook gated with another `min_drafts`."""
    deployed(site)
    path = f"{site.plan.release_dir}/manifest.json"
    manifest = json.loads(site.container.files[path])
    manifest["gate_target"]["gate"]["min_drafts"] += 10
    site.container.files[path] = json.dumps(manifest).encode()


def deployed_and_stopped(site: Site) -> None:
    deployed(site)
    site.container.server = None


def cancelled_before(site: Site) -> None:
    site.on(OLD)
    site.cancel.request(15)


def cancelled_in_write(site: Site) -> None:
    """A stop request while the release is written: the last safe point before the old
    server stops must hear it (the server is never stopped, nothing is audited)."""
    site.on(OLD)
    written = next(a for c, a in reversed(site.container.transport.rules) if c == "write_file")

    def write_then_stop(argv: Sequence[str], stdin: bytes | None) -> Result:
        if site.plan.release_dir in str(getattr(argv, "args", {}).get("path")):
            site.cancel.request(15)
        return written(argv, stdin)

    site.container.transport.on("write_file", write_then_stop)


def cancelled_in_gate(site: Site) -> None:
    site.on(OLD)
    site.gate.during = lambda: site.cancel.request(15)


def decided(choice: str, run_id: str = "run-now", after: float = 30.0) -> Setup:
    """Over OLD: `choice` written beside the lock for `run_id`, `after` seconds into
    the pause (`orch promote|abort|retry`); a retry's gate then passes."""

    def setup(site: Site) -> None:
        site.on(OLD, previous=OLDER)
        decision = {"run_id": run_id, "choice": choice, "by": "ops@ctl", "at": "t"}

        def decide() -> None:
            site.container.files[site.container.layout.decision] = json.dumps(decision).encode()
            if choice == "retry":
                site.gate.verdicts[site.new] = "pass"

        site.gate.during = lambda: (
            site.clock.after(after, decide) if not site.gate.asked[1:] else None
        )

    return setup


def died_then_promoted(site: Site) -> None:
    """The paused release's server dies, then someone promotes it."""
    decided("promote")(site)
    decide = site.gate.during
    site.gate.during = lambda: (decide(), site.clock.after(10, site.container.crash))


def cancelled_while_paused(site: Site) -> None:
    site.on(OLD, previous=OLDER)
    site.gate.during = lambda: site.clock.after(30, lambda: site.cancel.request(15))


def unlocked_while_paused(site: Site) -> None:
    """`orch unlock --force` while the gate is paused: the run notices at its next poll."""
    site.on(OLD, previous=OLDER)
    lock = f"{site.container.layout.lock}/owner.json"
    site.gate.during = lambda: site.clock.after(
        30, lambda: site.container.files.pop(lock, None) and None
    )


PAUSE = {"on_inconclusive": "pause", "pause_timeout": 60}
D = ("deploy", "deployed")
ROLLED = ("deploy", "rolled_back")
FAILED = ("deploy", "failed")

DEPLOYS: dict[str, tuple[Setup, dict[str, str], dict[str, Any], Expect]] = {
    "first, pass": (fresh, {}, {}, Expect("deployed", 0, NEW, True, [D], None)),
    "first, fail": (fresh, {NEW: "fail"}, {}, Expect("failed", 1, None, False, [FAILED], None)),
    "first, inconclusive, keep": (
        fresh,
        {NEW: "inconclusive"},
        {"on_inconclusive": "keep"},
        Expect("deployed", 0, NEW, True, [D]),
    ),
    "first, inconclusive, rollback": (
        fresh,
        {NEW: "inconclusive"},
        {},
        Expect("failed", 1, None, False, [FAILED]),
    ),
    "first, dead inconclusive, keep": (
        fresh,
        {NEW: "inconclusive-dead"},
        {"on_inconclusive": "keep"},
        Expect("failed", 1, None, False, [FAILED]),
    ),
    "over OLD, pass": (running_old, {}, {}, Expect("deployed", 0, NEW, True, [D], OLD)),
    "over OLD, fail, OLD passes": (
        running_old,
        {NEW: "fail"},
        {},
        Expect("rolled_back", 1, OLD, True, [ROLLED], OLDER),
    ),
    "over OLD, fail, OLD fails": (
        running_old,
        {NEW: "fail", OLD: "fail"},
        {},
        Expect("failed", 3, OLD, True, [FAILED], OLDER),
    ),
    "over OLD, fail, OLD inconclusive, keep": (
        running_old,
        {NEW: "fail", OLD: "inconclusive"},
        {"on_inconclusive": "keep"},
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "over OLD, inconclusive, keep": (
        running_old,
        {NEW: "inconclusive"},
        {"on_inconclusive": "keep"},
        Expect("deployed", 0, NEW, True, [D], OLD),
    ),
    "over OLD, inconclusive, rollback": (
        running_old,
        {NEW: "inconclusive"},
        {},
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "over OLD, dead inconclusive, keep": (
        running_old,
        {NEW: "inconclusive-dead"},
        {"on_inconclusive": "keep"},
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "over OLD, dead inconclusive, rollback": (
        running_old,
        {NEW: "inconclusive-dead"},
        {},
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "over stopped OLD, pass": (stopped_old, {}, {}, Expect("deployed", 0, NEW, True, [D], OLD)),
    "over stopped OLD, fail": (
        stopped_old,
        {NEW: "fail"},
        {},
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "preflight error: refused": (
        one_gpu,
        {},
        {},
        Expect("failed", 1, OLD, True, []),
    ),
    "preflight error, forced, pass": (
        one_gpu,
        {},
        {"force": True},
        Expect("deployed", 0, NEW, True, [D], OLD),
    ),
    "preflight error, forced, fail": (
        one_gpu,
        {NEW: "fail"},
        {"force": True},
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "unchanged": (
        deployed,
        {},
        {},
        Expect("unchanged", 0, NEW, True, [D, ("deploy", "unchanged")]),
    ),
    "unchanged, new gate settings pass: regated": (
        deployed_with_other_gate,
        {},
        {},
        Expect("regated", 0, NEW, True, [D, ("deploy", "regated")]),
    ),
    "unchanged, new gate settings fail: keeps serving": (
        deployed_with_other_gate,
        {NEW: "fail"},
        {},
        Expect("failed", 1, NEW, True, [D, FAILED]),
    ),
    "current but stopped, fail: one further back": (
        deployed_and_stopped,
        {NEW: "fail"},
        {},
        Expect("rolled_back", 1, OLD, True, [D, ROLLED]),
    ),
    "current but stopped, pass": (
        deployed_and_stopped,
        {},
        {},
        Expect("deployed", 0, NEW, True, [D, D], OLD),
    ),
    "stop request before the switch": (
        cancelled_before,
        {},
        {},
        Expect("interrupted", 143, OLD, True, []),
    ),
    "stop request while the release is written": (
        cancelled_in_write,
        {},
        {},
        Expect("interrupted", 143, OLD, True, []),
    ),
    "stop request in a gate that passes": (
        cancelled_in_gate,
        {},
        {},
        Expect("deployed", 0, NEW, True, [D]),
    ),
    "stop request in an inconclusive gate, keep": (
        cancelled_in_gate,
        {NEW: "inconclusive"},
        {"on_inconclusive": "keep"},
        Expect("interrupted", 143, OLD, True, [("deploy", "interrupted")]),
    ),
    "stop request in a failed gate": (
        cancelled_in_gate,
        {NEW: "fail"},
        {},
        Expect("interrupted", 143, OLD, True, [("deploy", "interrupted")]),
    ),
    "inconclusive, pause, promoted": (
        decided("promote"),
        {NEW: "inconclusive"},
        PAUSE,
        Expect("deployed", 0, NEW, True, [D], OLD),
    ),
    "inconclusive, pause, aborted": (
        decided("abort"),
        {NEW: "inconclusive"},
        PAUSE,
        Expect("rolled_back", 1, OLD, True, [ROLLED], OLDER),
    ),
    "inconclusive, pause, server died, promoted: rolled back": (
        died_then_promoted,
        {NEW: "inconclusive"},
        PAUSE,
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "inconclusive, pause, retried: passes": (
        decided("retry"),
        {NEW: "inconclusive"},
        PAUSE,
        Expect("deployed", 0, NEW, True, [D], OLD),
    ),
    "inconclusive, pause, no decision: timed out": (
        running_old,
        {NEW: "inconclusive"},
        PAUSE,
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "inconclusive, pause, another run's decision: timed out": (
        decided("promote", run_id="run-before"),
        {NEW: "inconclusive"},
        PAUSE,
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "inconclusive, pause, decision after the timeout: timed out": (
        decided("promote", after=120),
        {NEW: "inconclusive"},
        PAUSE,
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "dead inconclusive, pause: rolled back at once": (
        decided("promote"),
        {NEW: "inconclusive-dead"},
        PAUSE,
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "failed gate, pause: rolled back at once": (
        decided("promote"),
        {NEW: "fail"},
        PAUSE,
        Expect("rolled_back", 1, OLD, True, [ROLLED]),
    ),
    "stop request while paused": (
        cancelled_while_paused,
        {NEW: "inconclusive"},
        PAUSE,
        Expect("interrupted", 143, OLD, True, [("deploy", "interrupted")]),
    ),
    "lock removed while paused: back on OLD, needs attention": (
        unlocked_while_paused,
        {NEW: "inconclusive"},
        PAUSE,
        Expect("rolled_back", 3, OLD, True, [ROLLED]),
    ),
}


@pytest.mark.parametrize(("setup", "verdicts", "given", "expect"), DEPLOYS.values(), ids=DEPLOYS)
def test_deploy(
    models: dict[str, Path],
    setup: Setup,
    verdicts: dict[str, str],
    given: dict[str, Any],
    expect: Expect,
) -> None:
    sets = [f"gate.{k}={v}" for k, v in given.items() if k != "force"]
    site = Site(models, *sets)
    setup(site)
    site.gate.verdicts = {site.rid(k) or "": v for k, v in verdicts.items()}

    outcome = site.deploy(force=given.get("force", False))

    check(site, outcome, expect)


@pytest.mark.parametrize(
    ("version", "per_request"), [("0.27.1", False), ("0.28.0", False), ("0.29.0", True)]
)
def test_auto_deploys_the_launch_the_containers_vllm_can_run(
    models: dict[str, Path], version: str, per_request: bool
) -> None:
    """`gate.acceptance_source: auto`: vLLM before 0.29.0 has no
    --per-request-spec-decode-metrics (0.29.0 vllm/config/observability.py:48), so there
    the release written is the one without it, the notes say why, and a redeploy of it is
    unchanged."""
    site = Site(models)
    site.container.vllm_version = version
    assert site.plan.counters_plan is not None
    chosen = site.plan if per_request else site.plan.counters_plan
    site.gate.verdicts = {chosen.release_id: "pass"}

    outcome = site.deploy()

    assert (outcome.result, outcome.release) == ("deployed", chosen.release_id), outcome.error
    script = site.container.files[f"{site.plan.layout.release(chosen.release_id)}/serve.sh"]
    assert (b"--per-request-spec-decode-metrics" in script) is per_request
    said = [n for n in outcome.notes if n.startswith("gate.acceptance_source: auto")]
    assert said == ([] if per_request else [auto_source(version).why])
    assert site.deploy().result == "unchanged"


def test_a_forced_deploy_that_fails_cites_what_preflight_found(models: dict[str, Path]) -> None:
    site = Site(models)
    one_gpu(site)
    site.gate.verdicts = {site.new: "fail"}

    outcome = site.deploy(force=True)

    assert outcome.gate is not None and outcome.gate.explanation
    assert "Preflight had found: server.tensor_parallel_size 1 (expected '>= 2')" in (
        outcome.gate.explanation
    )
    manifest = json.loads(site.container.files[f"{site.plan.release_dir}/manifest.json"])
    assert [f["field"] for f in manifest["forced_findings"]] == ["server.tensor_parallel_size"]


@pytest.mark.parametrize("body", ["deploy", "rollback", "stop", "start", "restart", "remove"])
def test_a_lock_held_by_a_live_run_refuses_every_body(models: dict[str, Path], body: str) -> None:
    site = Site(models)
    site.on(OLD, previous=OLDER)
    alive = Owner("run-alive", "alice", "elsewhere", 1, time.time()).to_json().encode()
    site.container.files[site.container.layout.lock_owner] = alive
    before = dict(site.container.files)

    run = {"deploy": site.deploy, "rollback": site.rollback}
    outcome = run[body]() if body in run else site.act(body)  # type: ignore[arg-type]

    assert (outcome.result, outcome.exit_code) == ("failed", 3)
    assert "deploy lock held by run run-alive of alice@elsewhere" in (outcome.error or "")
    assert site.container.files == before and site.gate.asked == []


@pytest.mark.parametrize(
    ("gpus", "force", "exit_code"), [(2, False, 0), (1, False, 1), (1, True, 1)]
)
def test_a_dry_run_changes_nothing(
    models: dict[str, Path], gpus: int, force: bool, exit_code: int
) -> None:
    site = Site(models)
    site.on(OLD)
    if gpus == 1:
        site.container.gpus = "0, GPU-a, 49140, 100, 49040, NVIDIA RTX A6000\n"
    before = dict(site.container.files)

    outcome = site.deploy(dry_run=True, force=force)

    assert (outcome.result, outcome.exit_code) == ("dry_run", exit_code)
    assert site.container.files == before and site.container.events == []
    assert site.gate.asked == []


@pytest.mark.parametrize("kept", [2, 3, 4])
def test_old_releases_are_pruned_to_releases_kept(models: dict[str, Path], kept: int) -> None:
    site = Site(models, f"releases_kept={kept}")
    for rid in (OLDER, MID):
        site.kept(rid)
    site.on(OLD)

    site.deploy()

    prefix = site.container.layout.releases + "/"
    on_target = {
        p[len(prefix) :].split("/")[0] for p in site.container.files if p.startswith(prefix)
    }
    assert {site.new, OLD} <= on_target  # the new one and the one before it stay
    assert len(on_target) == min(kept, 4)


# -- recovery of an interrupted run --------------------------------------------------------------

SWITCH_STEPS = ["begin", "stop server", "switch current", "start server", "wait ready", "gate"]


@pytest.mark.parametrize("action", ["deploy", "rollback", "start", "restart"])
@pytest.mark.parametrize("step", [*SWITCH_STEPS, "paused", "gate passed"])
def test_an_interrupted_switch_is_undone_unless_gated(
    models: dict[str, Path], action: str, step: str
) -> None:
    site = Site(models)
    site.on(OLD, running=step in ("begin", "gate passed"))
    site.kept(MID)
    to = OLD if action in ("start", "restart") else MID
    if SWITCH_STEPS.index(step) >= 2 if step in SWITCH_STEPS else True:
        site.container.links[site.container.layout.current] = f"releases/{to}"
    site.journal(action=action, from_release=OLD, to_release=to, step=step)

    outcome = site.act("stop")

    back_on = to if step == "gate passed" else OLD
    assert outcome.recovered is not None
    assert (outcome.recovered.back_on, outcome.recovered.step) == (back_on, step)
    assert (outcome.recovered.gate is None) is (step == "gate passed")
    assert site.audit()[0] == ("recover", "recovered")
    assert site.link("current") == back_on
    assert (outcome.result, outcome.exit_code) == ("stopped", 0), outcome.error
    if step == "gate passed" and to != OLD:
        assert site.link("previous") == OLD


@pytest.mark.parametrize(
    ("action", "result", "current"), [("stop", "stopped", OLD), ("remove", "removed", None)]
)
@pytest.mark.parametrize("step", ["begin", "stop server", "remove releases"])
def test_an_interrupted_stop_or_remove_is_finished(
    models: dict[str, Path], action: str, result: str, current: str | None, step: str
) -> None:
    site = Site(models)
    site.on(OLD)
    site.journal(action=action, from_release=OLD, to_release=OLD, step=step)

    outcome = site.act("start")

    assert outcome.recovered is not None and outcome.recovered.back_on == current
    assert site.audit()[0] == ("recover", result)
    assert f"finished its {action}" in outcome.notes[0]
    if current is None:  # nothing left to start
        assert (outcome.exit_code, site.link("current")) == (2, None)
    else:
        assert (outcome.result, site.link("current")) == ("started", OLD)


def test_a_recovery_whose_way_back_fails_needs_attention(models: dict[str, Path]) -> None:
    site = Site(models)
    site.on(MID, running=False)
    site.kept(OLD)
    site.journal(action="deploy", from_release=OLD, to_release=MID, step="gate")
    site.gate.verdicts = {OLD: "fail"}

    outcome = site.deploy()

    assert (outcome.result, outcome.exit_code) == ("failed", 3)
    assert "did not pass its gate" in (outcome.error or "")
    assert site.audit() == [("recover", "recovered")]


@pytest.mark.parametrize(
    ("current", "running", "audit_left", "back_on", "verdict"),
    [
        (OLD, True, OLD, OLD, "nothing to undo"),
        (MID, True, OLD, OLD, f"going back to {OLD}"),
        (MID, False, OLD, OLD, f"going back to {OLD}"),
        (OLD, False, OLD, OLD, f"going back to {OLD}"),
        (MID, True, None, MID, "nothing to undo"),
    ],
)
def test_an_unreadable_journal_is_inferred_from_the_container(
    models: dict[str, Path],
    current: str,
    running: bool,
    audit_left: str | None,
    back_on: str,
    verdict: str,
) -> None:
    site = Site(models)
    site.kept(OLD)
    site.on(current, running=running)
    if audit_left:
        line = {"action": "deploy", "result": "deployed", "current": audit_left, "run_id": "r0"}
        site.container.audit(json.dumps(line))
    site.container.files[site.container.layout.journal] = b'{"run_id": "torn'

    outcome = site.act("stop")

    assert outcome.recovered is not None and outcome.recovered.inferred is not None
    assert outcome.recovered.back_on == back_on
    assert verdict in outcome.notes[0]
    assert site.link("current") == back_on


# -- rollback ------------------------------------------------------------------------------------


def changed_by_hand(site: Site) -> None:
    site.kept(OLDER, {"config.json": b'{"a": 1}'})
    site.container.files[f"{site.container.layout.release(OLDER)}/config.json"] = b'{"a": 2}'
    site.on(OLD, previous=OLDER)


ROLLBACKS: dict[str, tuple[Setup, str | None, dict[str, str], dict[str, Any], Expect]] = {
    "to previous, pass": (
        running_old,
        None,
        {},
        {},
        Expect("rolled_back", 0, OLDER, True, [("rollback", "rolled_back")], OLD),
    ),
    "to previous, fail: back on current": (
        running_old,
        None,
        {OLDER: "fail"},
        {},
        Expect("failed", 1, OLD, True, [("rollback", "failed")], OLDER),
    ),
    "to previous, both fail": (
        running_old,
        None,
        {OLDER: "fail", OLD: "fail"},
        {},
        Expect("failed", 3, OLD, True, [("rollback", "failed")]),
    ),
    "--to a kept release": (
        running_old,
        OLDER,
        {},
        {},
        Expect("rolled_back", 0, OLDER, True, [("rollback", "rolled_back")], OLD),
    ),
    "--to the current, running": (
        running_old,
        OLD,
        {},
        {},
        Expect("unchanged", 0, OLD, True, [("rollback", "unchanged")]),
    ),
    "--to the current, stopped": (
        stopped_old,
        OLD,
        {},
        {},
        Expect("rolled_back", 0, OLD, True, [("rollback", "rolled_back")]),
    ),
    "--to a release not kept": (running_old, MID, {}, {}, Expect("failed", 2, OLD, True, [])),
    "no previous release": (stopped_old, None, {}, {}, Expect("failed", 2, OLD, False, [])),
    "changed by hand: refused": (changed_by_hand, None, {}, {}, Expect("failed", 1, OLD, True, [])),
    "changed by hand, forced": (
        changed_by_hand,
        None,
        {},
        {"force": True},
        Expect("rolled_back", 0, OLDER, True, [("rollback", "rolled_back")]),
    ),
}


@pytest.mark.parametrize(
    ("setup", "to", "verdicts", "options", "expect"), ROLLBACKS.values(), ids=ROLLBACKS
)
def test_rollback(
    models: dict[str, Path],
    setup: Setup,
    to: str | None,
    verdicts: dict[str, str],
    options: dict[str, Any],
    expect: Expect,
) -> None:
    site = Site(models)
    setup(site)
    site.gate.verdicts = verdicts

    outcome = site.rollback(to, **options)

    check(site, outcome, expect)


# -- stop, start, restart, remove ----------------------------------------------------------------


def nothing(site: Site) -> None:
    return None


ACTIONS: dict[str, tuple[Setup, Action, dict[str, str], Expect]] = {
    "stop a running server": (
        running_old,
        "stop",
        {},
        Expect("stopped", 0, OLD, False, [("stop", "stopped")]),
    ),
    "stop a stopped one": (
        stopped_old,
        "stop",
        {},
        Expect("unchanged", 0, OLD, False, [("stop", "unchanged")]),
    ),
    "stop with nothing deployed": (
        nothing,
        "stop",
        {},
        Expect("unchanged", 0, None, False, [("stop", "unchanged")]),
    ),
    "start a stopped one": (
        stopped_old,
        "start",
        {},
        Expect("started", 0, OLD, True, [("start", "started")]),
    ),
    "start a running one": (
        running_old,
        "start",
        {},
        Expect("unchanged", 0, OLD, True, [("start", "unchanged")]),
    ),
    "start, gate fails": (
        stopped_old,
        "start",
        {OLD: "fail"},
        Expect("failed", 1, OLD, True, [("start", "failed")]),
    ),
    "start, inconclusive": (
        stopped_old,
        "start",
        {OLD: "inconclusive"},
        Expect("failed", 1, OLD, True, [("start", "failed")]),
    ),
    "start with nothing deployed": (nothing, "start", {}, Expect("failed", 2, None, False, [])),
    "restart": (
        running_old,
        "restart",
        {},
        Expect("restarted", 0, OLD, True, [("restart", "restarted")]),
    ),
    "restart a stopped one": (
        stopped_old,
        "restart",
        {},
        Expect("restarted", 0, OLD, True, [("restart", "restarted")]),
    ),
    "restart, gate fails": (
        running_old,
        "restart",
        {OLD: "fail"},
        Expect("failed", 1, OLD, True, [("restart", "failed")]),
    ),
    "restart, stop request in the gate": (
        cancelled_in_gate,
        "restart",
        {OLD: "inconclusive"},
        Expect("interrupted", 143, OLD, True, [("restart", "interrupted")]),
    ),
    "remove": (
        running_old,
        "remove",
        {},
        Expect("removed", 0, None, False, [("remove", "removed")]),
    ),
    "remove with nothing deployed": (
        nothing,
        "remove",
        {},
        Expect("removed", 0, None, False, [("remove", "removed")]),
    ),
}


@pytest.mark.parametrize(("setup", "action", "verdicts", "expect"), ACTIONS.values(), ids=ACTIONS)
def test_server_action(
    models: dict[str, Path], setup: Setup, action: Action, verdicts: dict[str, str], expect: Expect
) -> None:
    site = Site(models)
    setup(site)
    site.gate.verdicts = verdicts

    outcome = site.act(action)

    check(site, outcome, expect)
    if action == "remove":
        assert list(site.container.files) == [site.container.layout.audit_log]


def test_a_start_whose_server_dies_needs_attention(models: dict[str, Path]) -> None:
    site = Site(models)
    stopped_old(site)
    site.gate.verdicts = {OLD: "fail"}

    def dies() -> None:
        site.container.server = None

    site.gate.during = dies

    outcome = site.act("start")

    assert (outcome.result, outcome.exit_code) == ("failed", 3)
    assert "its server is not running" in (outcome.error or "")


# -- deploy --replace ----------------------------------------------------------------------------


def replacing(models: dict[str, Path], other_running: bool = True) -> tuple[Site, Site]:
    """`qwen-dflash` deployed with --replace other, where other's release OLD serves."""
    site = Site(models)
    other = Site(models, "name=other", "server.port=8001")
    other.on(OLD, running=other_running)
    deployment = other.deployment()
    site.neighbours = {"other": deployment, str(PLAYBOOK.resolve()): deployment}
    return site, other


@pytest.mark.parametrize(
    ("new", "restored", "result", "exit_code", "replaced", "other_running"),
    [
        ("pass", "pass", "deployed", 0, StayedStopped("other", OLD), False),
        ("fail", "pass", "rolled_back", 1, "restored", True),
        ("fail", "fail", "failed", 3, "failed", True),
        ("inconclusive", "pass", "rolled_back", 1, "restored", True),
    ],
)
def test_deploy_replace(
    models: dict[str, Path],
    new: str,
    restored: str,
    result: str,
    exit_code: int,
    replaced: StayedStopped | str,
    other_running: bool,
) -> None:
    site, other = replacing(models)
    site.gate.verdicts = {site.new: new}
    other.gate.verdicts = {OLD: restored}

    outcome = site.deploy(replace="other")

    assert (outcome.result, outcome.exit_code) == (result, exit_code), outcome.error
    printed = jsonable(outcome)["replaced"]  # docs/json.md: its keys, in this order
    assert list(printed) == ["playbook", "release", "result"] + (
        [] if isinstance(replaced, StayedStopped) else ["gate", "error"]
    )
    if isinstance(replaced, StayedStopped):
        assert outcome.replaced == replaced
        assert other.audit() == [("stop", "stopped")]
    else:
        assert isinstance(outcome.replaced, Restored) and outcome.replaced.result == replaced
        assert other.audit() == [("start", "started" if replaced == "restored" else "failed")]
        assert site.link("current") is None  # nothing of ours ran before: nothing to go back to
    assert (other.container.server is not None) is other_running
    assert other.link("current") == OLD


def test_deploy_replace_of_a_stopped_server_stops_nothing(models: dict[str, Path]) -> None:
    site, other = replacing(models, other_running=False)

    outcome = site.deploy(replace="other")

    assert (outcome.result, outcome.replaced) == ("deployed", None)
    assert other.audit() == []


@pytest.mark.parametrize("ending", ["fails its gate", "interrupted"])
def test_a_replace_that_does_not_stay_keeps_both_playbooks(
    models: dict[str, Path], ending: str
) -> None:
    """Issue 33: this playbook's server was stopped by an earlier --replace (on MID);
    its deploy --replace other does not stay: other is restored and serving, and MID
    stays this playbook's `current`, its server stopped, startable again."""
    site, other = replacing(models)
    site.on(MID, running=False, previous=OLDER)
    site.gate.verdicts = {site.new: "fail"}
    if ending == "interrupted":
        site.gate.verdicts = {site.new: "inconclusive"}
        site.gate.during = lambda: site.cancel.request(15)
    other.gate.verdicts = {OLD: "pass"}

    outcome = site.deploy(replace="other")

    assert (site.link("current"), site.link("previous")) == (MID, OLDER)
    assert site.container.server is None
    assert outcome.current == MID
    assert f"back on {MID} (stopped, as before this run)" in (outcome.error or "")
    assert "other restored" in (outcome.error or "")
    assert isinstance(outcome.replaced, Restored) and outcome.replaced.result == "restored"
    assert (other.link("current"), other.container.server is not None) == (OLD, True)
    site.cancel, site.gate.during = Cancel(), lambda: None  # the next run, not stopped
    site.gate.verdicts = {MID: "pass"}
    other.container.server = None  # as `orch stop other` would leave it

    started = site.act("start")

    assert (started.result, started.current) == ("started", MID)


def test_a_killed_replace_over_a_stopped_server_recovers_its_current(
    models: dict[str, Path],
) -> None:
    """SIGKILL in the gate of a --replace over this playbook's stopped server (MID):
    the next run undoes it to MID, stopped, and restores other."""
    site, other = replacing(models, other_running=False)
    site.kept(MID)
    site.kept(OLDER)
    site.on(OLDER, running=True)
    replaced = {"playbook": "other", "file": str(PLAYBOOK.resolve()), "release": OLD}
    site.journal(
        action="deploy",
        from_release=None,
        to_release=OLDER,
        step="gate",
        replaced=replaced,
        stopped_on=MID,
    )
    # one container: other's run (settling it) sees the journal as a sibling's
    other.container.files[site.container.layout.journal] = site.container.files[
        site.container.layout.journal
    ]

    outcome = site.act("stop")

    assert outcome.recovered is not None and outcome.recovered.back_on == MID
    assert site.link("current") == MID and site.container.server is None
    assert outcome.recovered.replaced is not None
    assert outcome.recovered.replaced.result == "restored"
    assert (other.link("current"), other.container.server is not None) == (OLD, True)


def test_a_run_of_the_replaced_playbook_recovers_a_killed_replace(
    models: dict[str, Path],
) -> None:
    """Issue 35 cause 13: after a --replace killed in its gate, `orch start other` (the
    replaced playbook) recovers the pair: the replacing deployment back on MID,
    stopped, and other's OLD started and gated, instead of waiting on the GPUs the
    ungated new server holds."""
    site, other = replacing(models, other_running=False)
    site.kept(MID)
    site.kept(OLDER)
    site.on(OLDER, running=True)
    replaced = {"playbook": "other", "file": str(PLAYBOOK.resolve()), "release": OLD}
    site.journal(
        action="deploy",
        from_release=None,
        to_release=OLDER,
        step="gate",
        replaced=replaced,
        stopped_on=MID,
    )
    # one container: the replacing deployment's journal is a sibling of other's
    other.container.files[site.container.layout.journal] = site.container.files[
        site.container.layout.journal
    ]
    other.neighbours = {site.playbook.name: site.deployment()}

    outcome = other.act("start")

    assert outcome.exit_code == 0, outcome.error
    assert (site.link("current"), site.container.server) == (MID, None)
    assert site.container.layout.journal not in site.container.files
    assert (other.link("current"), other.container.server is not None) == (OLD, True)
    assert outcome.recovered is not None and outcome.recovered.replaced is not None
    assert outcome.recovered.replaced.result == "restored"
    assert any("qwen-dflash: recovered interrupted run run-dead" in n for n in outcome.notes)


@pytest.mark.parametrize(
    ("step", "other_running", "audit"),
    [
        ("gate", True, [("start", "started")]),
        ("switch current", True, [("start", "started")]),
        ("gate passed", False, [("stop", "stopped")]),
    ],
)
def test_an_interrupted_replace_settles_the_replaced_playbook(
    models: dict[str, Path], step: str, other_running: bool, audit: list[tuple[str, str]]
) -> None:
    site, other = replacing(models, other_running=False)
    site.kept(MID)
    site.container.links[site.container.layout.current] = f"releases/{MID}"
    replaced = {"playbook": "other", "file": str(PLAYBOOK.resolve()), "release": OLD}
    site.journal(action="deploy", from_release=None, to_release=MID, step=step, replaced=replaced)

    outcome = site.act("stop")

    assert outcome.recovered is not None and outcome.recovered.replaced is not None
    assert list(jsonable(outcome)["recovered"]) == [
        "inferred",
        "run_id",
        "started",
        "action",
        "step",
        "from_release",
        "to_release",
        "back_on",
        "gate",
        "replaced",
    ]
    assert outcome.recovered.replaced.result == ("stopped" if step == "gate passed" else "restored")
    assert other.audit() == audit
    assert (other.container.server is not None) is other_running


@pytest.mark.parametrize("step", ["switch current", "start server", "gate", "stop failed server"])
def test_an_interrupted_first_deploy_is_undone_to_nothing(
    models: dict[str, Path], step: str
) -> None:
    site = Site(models)
    site.kept(MID)
    site.on(MID, running=step != "stop failed server")
    site.journal(action="deploy", from_release=None, to_release=MID, step=step)

    outcome = site.act("stop")

    assert outcome.recovered is not None and outcome.recovered.back_on is None
    assert "its server stopped, nothing to go back to" in outcome.notes[0]
    assert (site.link("current"), site.container.server) == (None, None)
    assert site.audit() == [("recover", "recovered"), ("stop", "unchanged")]


def test_a_release_that_reads_back_otherwise_is_refused_before_the_switch(
    models: dict[str, Path],
) -> None:
    site = Site(models)
    site.on(OLD)
    c = site.container

    def torn(argv: Any, _stdin: bytes | None) -> Result:
        paths = dict(argv.args)["paths"]
        read = [
            (p, c.files[p][:-1] if "/releases/" in p else c.files[p]) for p in paths if p in c.files
        ]
        return Result(tuple(argv), 0, frames(read), b"")

    c.transport.on("read_files", torn)

    outcome = site.deploy()

    assert (outcome.result, outcome.exit_code) == ("failed", 1)
    assert (outcome.error or "").startswith("cat-verify failed, the server was not touched")
    assert (site.link("current"), c.server, site.audit()) == (OLD, 4242, [])
    assert site.gate.asked == []


# -- a lock removed by `orch unlock --force` during the run ----------------------------------


def test_a_lock_removed_before_the_switch_is_noticed_at_once(models: dict[str, Path]) -> None:
    """Issue 33 item 2: noticed at the safe point before the switch by reading the lock
    there, not at the next heartbeat (a quarter lease away): nothing is switched."""
    site = Site(models)
    site.on(OLD)
    lock = f"{site.container.layout.lock}/owner.json"
    # the diff is shown after the release is written, before the old server stops
    run = TargetRun(
        site.deployment(diff=True), show_diff=lambda *_: site.container.files.pop(lock, None)
    )

    outcome = run.deploy()

    assert (outcome.result, outcome.exit_code) == ("failed", 3), outcome.error
    assert "the deploy lock was removed by orch unlock --force; nothing was switched" in (
        outcome.error or ""
    )
    assert site.link("current") == OLD and site.container.server is not None
    assert site.gate.asked == []


@pytest.mark.parametrize(("verdict", "current"), [("pass", NEW), ("fail", OLD)])
def test_a_lock_removed_during_the_gate_stops_the_run_on_a_gated_release(
    models: dict[str, Path], verdict: str, current: str
) -> None:
    """After the switch the run still ends on a gated release (kept, or the way back),
    then stops there: exit 3 naming why, nothing pruned."""
    site = Site(models, "releases_kept=2")
    site.on(OLD, previous=OLDER)
    site.gate.verdicts = {site.new: verdict}
    lock = f"{site.container.layout.lock}/owner.json"
    site.gate.during = lambda: site.container.files.pop(lock, None)

    outcome = site.deploy()

    assert outcome.exit_code == 3, outcome.error
    assert outcome.result == ("deployed" if verdict == "pass" else "rolled_back")
    assert "the deploy lock was removed by orch unlock --force: stopped after the switch" in (
        outcome.error or ""
    )
    assert site.link("current") == site.rid(current) and site.container.server is not None
    assert site.container.layout.journal not in site.container.files
    assert OLDER in {r.rsplit("/", 2)[-2] for r in site.container.files if "/releases/" in r}


# -- after the verdict ---------------------------------------------------------------------------


def dies_after_verdict(site: Site) -> None:
    """The new server passes its gate, then exits (a crash seconds after ready)."""
    site.on(OLD)

    def die() -> None:
        if site.link("current") == site.new:
            site.clock.after(2.0, lambda: setattr(site.container, "server", None))

    site.gate.during = die


@pytest.mark.parametrize(
    ("setup", "why"),
    [(dies_after_verdict, "the server exited 2 s after its gate passed")],
)
def test_a_server_that_dies_after_its_verdict_is_rolled_back(
    models: dict[str, Path], setup: Setup, why: str
) -> None:
    site = Site(models)
    setup(site)

    outcome = site.deploy()

    check(site, outcome, Expect("rolled_back", 1, OLD, True, [ROLLED], previous=False))
    assert why in (outcome.error or "")
    assert "settle" in site.container.journal_steps


def test_the_settle_watches_for_settle_seconds_then_probes_once(models: dict[str, Path]) -> None:
    site = Site(models, "gate.settle_seconds=7")
    site.on(OLD)

    outcome = site.deploy()

    assert outcome.result == "deployed", outcome.error
    assert site.clock.slept >= 7
    probes = [r for r in site.container.transport.requests if r == ("POST", "/v1/completions")]
    assert len(probes) == 1


PASSED_CHECK = json.dumps(
    {
        "version": "0.32.0",
        "stages": [{"name": "parser", "status": "ok", "detail": "", "seconds": 9.0}],
        "seconds": 9.0,
    }
).encode()


def checks(site: Site) -> int:
    """How many times the deploys asked the target's vLLM (the check's script runs it)."""
    return sum(FIND_PYTHON in call.argv for call in site.container.transport.calls)


def test_a_passing_check_is_kept_and_the_next_deploy_reuses_it_and_says_from_when(
    models: dict[str, Path],
) -> None:
    site = Site(models)
    site.container.install = b"/opt/vllm/lib/python3/site-packages/vllm-0.32.0.dist-info/RECORD\n"
    site.container.transport.on("validate_launch", lambda argv, _: Result((), 0, PASSED_CHECK, b""))
    site.on(OLD)

    first = site.deploy()
    assert first.result == "deployed" and checks(site) == 1
    kept = json.loads(site.container.files[site.container.layout.server_check])
    assert (kept["run_id"], kept["reply"]["version"]) == ("run-now", "0.32.0")
    assert not [n for n in first.notes if "reused" in n]

    again = site.deploy()
    assert again.result == "unchanged" and checks(site) == 1
    assert [n for n in again.notes if "reused" in n] == [
        f"the server check reused vLLM 0.32.0's passing verdict on this launch from "
        f"{kept['time']} (run run-now) (--recheck checks again)"
    ]
    site.deploy(recheck=True)
    assert checks(site) == 2


def test_a_rollback_takes_the_vllm_version_from_the_kept_verdict_unless_rechecked(
    models: dict[str, Path],
) -> None:
    """A run without preflight fingerprints the speed reference with the vLLM version:
    the kept verdict on the current release's launch says it while the install is
    unchanged, so no `vllm --version` (a vLLM import) runs; `--recheck` asks it."""
    site = Site(models)
    site.container.install = b"/opt/vllm/lib/python3/site-packages/vllm-0.32.0.dist-info/RECORD\n"
    site.container.transport.on("validate_launch", lambda argv, _: Result((), 0, PASSED_CHECK, b""))
    asked: list[str] = []

    def version(argv: Sequence[str], _stdin: bytes | None) -> Result:
        asked.append("vllm --version")
        return Result(tuple(argv), 0, b"0.32.0\n", b"")

    site.container.transport.on("read_vllm_version", version)
    site.on(OLD)
    assert site.deploy().result == "deployed" and checks(site) == 1

    assert site.rollback().result == "rolled_back"
    assert asked == []
    site.on(NEW, previous=OLD)  # back on the release whose verdict is kept
    assert site.rollback(recheck=True).result == "rolled_back"
    assert asked == ["vllm --version"]


def test_a_dry_run_keeps_no_verdict(models: dict[str, Path]) -> None:
    site = Site(models)
    site.container.install = b"/opt/vllm/lib/python3/site-packages/vllm-0.32.0.dist-info/RECORD\n"
    site.container.transport.on("validate_launch", lambda argv, _: Result((), 0, PASSED_CHECK, b""))
    site.on(OLD)
    assert site.deploy(dry_run=True).result == "dry_run"
    assert site.container.layout.server_check not in site.container.files


# -- a gate paused for a decision (gate.on_inconclusive: pause) ---------------------------------


def test_a_promoted_release_says_who_promoted_it_with_the_figures_decided_on(
    models: dict[str, Path],
) -> None:
    site = Site(models, "gate.on_inconclusive=pause")
    decided("promote")(site)
    site.gate.verdicts = {site.new: "inconclusive"}

    outcome = site.deploy()

    promoted = Decision("run-now", "promote", "ops@ctl", "t")
    assert outcome.decisions == [promoted]
    assert outcome.gate is not None and outcome.gate.verdict.outcome == "inconclusive"
    manifest = json.loads(site.container.files[f"{site.plan.release_dir}/manifest.json"])
    assert manifest["promoted"] == jsonable(promoted)
    audited = json.loads(site.container.files[site.container.layout.audit_log].splitlines()[-1])
    assert audited["decisions"] == [jsonable(promoted)]
    assert "paused" in site.container.journal_steps
    assert site.container.layout.decision not in site.container.files
    waiting = next(n for n in outcome.notes if "paused" in n)
    limit = f"-i INVENTORY --limit {site.plan.container}"
    assert f"promote: orch promote qwen-dflash {limit}" in waiting
    assert f"abort: orch abort qwen-dflash {limit}" in waiting


def test_a_pause_with_no_decision_ends_as_an_abort_at_its_timeout_saying_so(
    models: dict[str, Path],
) -> None:
    site = Site(models, "gate.on_inconclusive=pause", "gate.pause_timeout=60")
    site.on(OLD)
    site.gate.verdicts = {site.new: "inconclusive"}
    started = site.clock.now()

    outcome = site.deploy()

    assert 60 <= site.clock.now() - started < 70
    assert "paused, then aborted by orch (no decision within the pause timeout of 60 s)" in (
        outcome.error or ""
    )
    assert outcome.decisions and outcome.decisions[0].choice == "abort"
