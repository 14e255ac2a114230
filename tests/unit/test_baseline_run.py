"""`orch baseline` on one scripted container: the gated release's server stopped, the
launch minus speculation served and measured, the record written and read back, the
gated release served and gated again; interrupted at any step, back on the gated
release (this run, or the next one after a kill). The speed measurement is scripted."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence

import pytest
from scripted import ScriptedGate
from transactions import BUCKETS, Container, DiskFillsAt, setup

from orchestrator.baseline import SPECULATION_FLAGS, BaselineRecord, ReferenceFacts, parse_record
from orchestrator.cancel import Cancel
from orchestrator.deadline import Clock
from orchestrator.gate.probe import Target
from orchestrator.gate.report import SpeedLevel, SpeedReport, Tick
from orchestrator.layout import LAUNCH_SCRIPT
from orchestrator.metrics.speed import Figure
from orchestrator.metrics.speedup import NO_REFERENCE
from orchestrator.playbook import Gate
from orchestrator.probes.context import ContextBucket
from orchestrator.transaction.baseline import ContainerBaseline
from orchestrator.transaction.deployment import Deployment
from orchestrator.transaction.options import Options
from orchestrator.transaction.reference import read_facts, read_fingerprint
from orchestrator.transaction.target import TargetRun

GATED = "aaaaaaaaaaaa"
LEVELS = [
    SpeedLevel(1, requests=10, total_tokens_per_second=Figure(40.0, 38.0, 42.0)),
    SpeedLevel(8, requests=10, total_tokens_per_second=Figure(160.0, 150.0, 170.0)),
]


class Killed(BaseException):
    """The run dies here (SIGKILL): nothing of it runs after, its journal stays."""


class Measurer:
    """The baseline server's speed as scripted; what was served when it measured."""

    def __init__(self, container: Container, during: Callable[[], None] = lambda: None) -> None:
        self.container, self.during = container, during
        self.launches: list[bytes] = []

    def __call__(
        self,
        target: Target,
        gate: Gate,
        buckets: Sequence[ContextBucket],
        stop: threading.Event | None,
        tick: Tick,
        clock: Clock,
    ) -> SpeedReport:
        current = self.container.links[self.container.layout.current].rsplit("/", 1)[-1]
        self.launches.append(self.container.files[self.container.layout.launch_script(current)])
        self.during()
        return SpeedReport(levels=list(LEVELS))


class Site:
    def __init__(self) -> None:
        self.playbook, self.plan, self.container = setup()
        self.container.gated_release(GATED, self.playbook.target.served_name)
        self.container.links[self.container.layout.current] = f"releases/{GATED}"
        self.container.transport.on_http("GET", "/health", lambda _: (200, b""))
        self.container.transport.on_http("POST", "/v1/completions", lambda _: (200, b"{}"))
        self.gate = ScriptedGate(self.container)
        self.cancel = Cancel()
        self.measurer = Measurer(self.container)
        self.steps: list[str] = []
        self.kill_at: str | None = None

    def progress(self, name: str, step: str, detail: str = "") -> None:
        self.steps.append(step)
        if step == self.kill_at:
            raise Killed(step)

    def deployment(self, run_id: str = "run-now", force: bool = False) -> Deployment:
        return Deployment(
            self.plan,
            self.container.transport,
            self.playbook,
            BUCKETS,
            "nvidia-smi",
            Options(run_id=run_id, user="ops", force=force),
            progress=self.progress,
            cancel=self.cancel,
            run_gate=self.gate,
            measure=self.measurer,
        )

    def baseline(self, run_id: str = "run-now") -> ContainerBaseline:
        return ContainerBaseline(self.deployment(run_id))

    def current(self) -> str:
        return self.container.links[self.container.layout.current].rsplit("/", 1)[-1]

    def record(self) -> BaselineRecord | str | None:
        data = self.container.files.get(self.container.layout.baseline)
        return parse_record(data) if data is not None else None

    def audit(self) -> list[tuple[str, str]]:
        raw = self.container.files.get(self.container.layout.audit_log, b"")
        return [(a["action"], a["result"]) for a in map(json.loads, raw.splitlines())]


def baseline_dirs(site: Site) -> list[str]:
    prefix = site.container.layout.releases + "/baseline-"
    return sorted(
        {p[len(prefix) :].split("/")[0] for p in site.container.files if p.startswith(prefix)}
    )


def test_a_baseline_serves_without_speculation_records_and_ends_on_the_gated_release() -> None:
    site = Site()

    outcome = site.baseline().run()

    assert (outcome.result, outcome.exit_code, outcome.current) == ("measured", 0, GATED), (
        outcome.error
    )
    served = site.measurer.launches[0].decode().splitlines()
    planned = site.plan.files[LAUNCH_SCRIPT].decode().splitlines()
    left_out = [line for line in planned if line not in served]
    assert [line.split()[0] for line in left_out] == list(SPECULATION_FLAGS)
    assert [line for line in planned if line in served] == served
    record = site.record()
    assert isinstance(record, BaselineRecord) and record == outcome.baseline
    assert [lv.concurrency for lv in record.levels] == [1, 8]
    assert (record.release, record.run_id, record.fingerprint.vllm) == (GATED, "run-now", "0.32.0")
    assert site.current() == GATED and site.container.server is not None
    assert site.gate.asked[-1][0] == GATED  # gated again once back
    reference = site.gate.references[-1]
    assert reference is not None and reference.kind == "baseline"  # by the new baseline
    assert baseline_dirs(site) == []  # pruned
    assert site.container.layout.journal not in site.container.files
    assert site.audit() == [("baseline", "measured")]


def test_a_deploy_after_a_baseline_is_judged_against_it_and_a_changed_vllm_is_named() -> None:
    site = Site()
    site.baseline().run()

    deployed = TargetRun(site.deployment("run-deploy", force=True)).deploy()  # no model here

    assert deployed.result == "deployed", deployed.error
    reference = site.gate.references[-1]
    assert reference is not None and reference.kind == "baseline"
    assert reference.at(8) == Figure(160.0, 150.0, 170.0)

    site.container.vllm_version = "0.34.0"
    d = site.deployment("run-rollback")
    d.reference_facts = read_facts(d, read_fingerprint(d))
    d.outcome.previous_release = site.plan.release_id
    choice = d.reference(GATED)
    assert choice is not None and choice.reference is None  # its gate recorded no speed
    assert choice.why.startswith("baseline measured for vLLM 0.32.0, the server is 0.34.0")


def test_a_server_that_does_not_start_without_speculation_ends_back_on_the_gated_release() -> None:
    site = Site()
    started = site.container._start_server

    def refuse_baseline(launch_script: str, **rest: str) -> str:
        if "/baseline-" in launch_script:
            site.container.server = None
            return "4243 99 0"  # started, then gone at once
        return started(launch_script, **rest)

    site.container.transport.on("start_server", site.container._answer(refuse_baseline))

    outcome = site.baseline().run()

    assert (outcome.result, outcome.exit_code, outcome.current) == ("failed", 1, GATED)
    assert "without speculation did not become ready" in (outcome.error or "")
    assert site.record() is None and site.current() == GATED
    assert site.container.server is not None and baseline_dirs(site) == []


def test_nothing_serving_is_refused_with_nothing_changed() -> None:
    site = Site()
    site.container.server = None

    outcome = site.baseline().run()

    assert (outcome.exit_code, site.current(), site.container.server) == (2, GATED, None)
    assert "no gated release serving here" in (outcome.error or "")
    assert site.audit() == []


def test_a_stop_request_while_measuring_ends_back_on_the_gated_release() -> None:
    site = Site()
    site.measurer.during = lambda: site.cancel.request(2)

    outcome = site.baseline().run()

    assert (outcome.result, outcome.exit_code, outcome.current) == ("interrupted", 130, GATED)
    assert site.record() is None and site.current() == GATED and site.container.server
    assert baseline_dirs(site) == [] and site.audit() == [("baseline", "interrupted")]


KILL_STEPS = [
    "baseline stop server",
    "baseline switch current",
    "baseline start server",
    "baseline wait ready",
    "baseline speed",
    "record baseline",
    "back stop server",
    "back switch current",
    "back start server",
    "back wait ready",
    "back gate",
    "back settle",
]


@pytest.mark.parametrize("step", KILL_STEPS)
@pytest.mark.parametrize("next_run", ["baseline", "deploy"])
def test_a_baseline_killed_at_any_step_is_undone_by_the_next_run(step: str, next_run: str) -> None:
    site = Site()
    site.kill_at = step
    with pytest.raises(Killed):
        site.baseline("run-killed").run()
    journal = json.loads(site.container.files[site.container.layout.journal])
    assert (journal["action"], journal["from_release"], journal["step"]) == (
        "baseline",
        GATED,
        step,
    )
    site.kill_at = None

    if next_run == "baseline":
        outcome = site.baseline("run-next").run()
        assert outcome.result == "measured", outcome.error
    else:
        outcome = TargetRun(site.deployment("run-next", force=True)).deploy()
        assert outcome.result == "deployed", outcome.error
    assert outcome.recovered is not None
    assert (outcome.recovered.action, outcome.recovered.back_on) == ("baseline", GATED)
    assert site.audit()[0] == ("recover", "recovered")
    assert baseline_dirs(site) == []
    assert site.container.layout.journal not in site.container.files


def test_the_journal_names_every_step_once_the_gated_server_may_stop() -> None:
    site = Site()
    site.baseline().run()
    assert site.container.journal_steps == ["begin", *KILL_STEPS]
    assert site.steps[:3] == ["fingerprint", "write baseline release", "cat-verify"]


def gated_with_speed(release_id: str, total: float) -> str:
    """An audit line of the run that gated `release_id`, its speed measured at 1 stream."""
    level = {"concurrency": 1, "total_tokens_per_second": {"mean": total}}
    gate = {"verdict": "pass", "speed": {"verdict": "not_judged", "levels": [level]}}
    record = {"run_id": f"run-{release_id[:4]}", "current": release_id, "current_gate": gate}
    return json.dumps({"action": "deploy", "result": "deployed", "release": release_id, **record})


def test_going_back_is_judged_against_a_baseline_only_never_the_release_it_replaces() -> None:
    """A new release is judged against the release it replaces; a rollback or a restore
    to an earlier one is not: going back is the operator's call, and the release it
    replaces (faster, maybe) is the one being taken away."""
    site = Site()
    new = site.plan.release_id
    d = site.deployment("run-choice")
    d.reference_facts = ReferenceFacts(None, None, [gated_with_speed(GATED, 90.0)])
    d.outcome.previous_release = GATED
    forward = d.reference(new)
    assert forward is not None and forward.reference is not None
    assert (forward.reference.kind, forward.reference.at(1)) == ("replaced_release", Figure(90.0))

    d.reference_facts = ReferenceFacts(None, None, [gated_with_speed(new, 900.0)])
    d.outcome.previous_release = new
    back = d.reference(GATED)
    assert back is not None and back.reference is None
    assert back.why == "no baseline recorded; no release replaced: " + NO_REFERENCE


def test_a_disk_that_fills_while_measuring_ends_back_on_the_gated_release() -> None:
    """Issue 35 cause 4: the way back to the gated release goes on when the journal can
    no longer be written, and says so."""
    site = Site()
    disk = DiskFillsAt(site.container, "baseline switch current")

    outcome = site.baseline().run()

    assert disk.full
    assert (outcome.result, outcome.current, site.current()) == ("failed", GATED, GATED)
    assert site.container.server is not None and outcome.exit_code == 1, outcome.error
    assert any("the journal could not be written at 'back stop server'" in n for n in outcome.notes)
    assert site.container.layout.journal not in site.container.files
