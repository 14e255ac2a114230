"""The transaction and the gate on an in-memory container: fast, no processes.

`Container` keeps a tiny filesystem (files, links, the lock) in dicts and answers
the scripts of `commands` the way a container would; its vLLM answers /health,
/metrics (counters that grow with every scrape) and completions.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Sequence

import pytest
from test_plan import EXAMPLE, PLAYBOOK

from orchestrator.cancel import Cancel
from orchestrator.container.gpu import wait_free
from orchestrator.container.lock import Owner
from orchestrator.deploy import Options, TargetRun
from orchestrator.drafters.kinds import get_kind
from orchestrator.gate import run_gate
from orchestrator.inventory import load_inventory
from orchestrator.plan import TargetPlan, plan_deploy
from orchestrator.playbook import Gate, Playbook, Probe, load_playbook
from orchestrator.probes.context import ContextBucket
from orchestrator.release import GateTarget
from orchestrator.transport.base import Result
from orchestrator.transport.memory import MemoryTransport, reply

CAUSES = get_kind("dflash").failure_causes

FAST_GATE = Gate(
    min_drafts=50,
    probe=Probe(scrape_interval=0.02, concurrency=1, max_tokens=8, endpoints=["completions"]),
)
BUCKETS = [ContextBucket("short", 0, None, ("hello",))]


def metrics(scrape: int) -> bytes:
    """Counters after `scrape` intervals of 100 drafts of 4 tokens, 3.0 accepted each."""
    drafts = 100 * scrape
    per_pos = [int(drafts * r) for r in (0.9, 0.8, 0.7, 0.6)]
    lines = []
    for name, value in (
        ("num_drafts", drafts),
        ("num_draft_tokens", 4 * drafts),
        ("num_accepted_tokens", sum(per_pos)),
    ):
        family = f"vllm:spec_decode_{name}"
        lines += [f"# TYPE {family} counter", f"{family}_total {value}"]
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
        for i, v in enumerate(per_pos)
    ]
    return ("\n".join(lines) + "\n").encode()


def serving(transport: MemoryTransport, served_name: str) -> list[str]:
    """A vLLM that is ready at once; returns the model names its completions were asked for."""
    asked: list[str] = []
    scrapes = iter(range(1, 10_000))

    def complete(body: bytes) -> tuple[int, bytes]:
        model = json.loads(body)["model"]
        asked.append(model)
        time.sleep(0.01)  # a request takes a little while: the traffic outlasts a few scrapes
        return (200, b"{}") if model == served_name else (404, b"no such model")

    transport.on_http("GET", "/health", lambda _: (200, b""))
    transport.on_http("GET", "/metrics", lambda _: (200, metrics(next(scrapes))))
    transport.on_http("POST", "/v1/completions", complete)
    return asked


# -- the gate ------------------------------------------------------------------------------------


def test_gate_passes_on_counters_that_grow_well() -> None:
    transport = MemoryTransport()
    serving(transport, "m")
    report = run_gate(transport, "10.0.0.5", 8000, "m", FAST_GATE, BUCKETS, CAUSES)
    assert report.verdict.outcome == "pass", report.verdict.reason
    assert report.verdict.mean_acceptance_length == pytest.approx(4.0)
    assert ("GET", "/metrics") in transport.requests


def test_a_gate_whose_requests_all_fail_fails_though_its_counters_pass() -> None:
    transport = MemoryTransport()
    serving(transport, "someone-else")  # every completion is a 404; the counters still grow
    report = run_gate(transport, "10.0.0.5", 8000, "m", FAST_GATE, BUCKETS, CAUSES)
    assert report.verdict.outcome == "fail", report.verdict.reason
    assert report.request_errors == report.requests > 0
    assert "probe requests failed" in report.verdict.reason
    assert "first: HTTP 404 from /v1/completions" in report.verdict.reason


def test_gate_on_garbage_metrics_could_not_measure() -> None:
    transport = MemoryTransport()
    serving(transport, "m")
    transport.on_http("GET", "/metrics", lambda _: (200, b"<html>nope</html>"))
    report = run_gate(transport, "10.0.0.5", 8000, "m", FAST_GATE, BUCKETS, CAUSES)
    assert report.verdict.outcome == "inconclusive"
    assert "could not measure" in report.verdict.reason


def test_a_stop_request_ends_the_gate_undecided() -> None:
    transport = MemoryTransport()
    serving(transport, "m")
    transport.on_http("GET", "/metrics", lambda _: (200, metrics(1)))  # never moves
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    report = run_gate(transport, "10.0.0.5", 8000, "m", FAST_GATE, BUCKETS, CAUSES, stop)
    assert report.verdict.outcome == "inconclusive"
    assert "interrupted" in report.verdict.reason


# -- the transaction -----------------------------------------------------------------------------


class Container:
    """The files, links and lock of one deployment, answering `commands` scripts."""

    def __init__(self, plan: TargetPlan) -> None:
        self.layout = plan.layout
        self.files: dict[str, bytes] = {}
        self.links: dict[str, str] = {}
        self.journal_steps: list[str] = []
        self.events: list[str] = []
        self.transport = MemoryTransport(plan.container)
        t = self.transport  # the newest matching rule answers: specific needles come last
        t.on("mktemp", self._write)
        t.on("rm -f --", self._remove)
        self.heartbeat_age = 0  # seconds, as the container's clock measures it
        t.on(">> ", self._audit)
        t.on("for p in", self._read_files)
        t.on("readlink", lambda argv, _: reply(self.links.get(self._paths(argv)[0], ""))(argv, _))
        t.on("ln -sfn", self._link)
        t.on("stat -c %Y", self._list)
        t.on("kill -s TERM", reply("stopped 4242"))
        t.on("--query-gpu", reply(exit_code=9))  # no GPU facts: nothing to wait for
        t.on("setsid", self._start)
        t.on("frame server", self._watch)
        t.on("}\nrecorded ", reply("running 4242"))  # commands.server_state
        t.on('rm -rf "$gone"', self._release)
        t.on('if mv -T "$new"', self._acquire)
        t.on("/takeover 2>/dev/null || {", self._take_over)

    @staticmethod
    def _script(argv: Sequence[str]) -> str:
        return argv[-1]

    def _paths(self, argv: Sequence[str]) -> list[str]:
        return [w for w in shlex.split(self._script(argv).replace(";", " ")) if w.startswith("/")]

    def _acquire(self, argv: Sequence[str], _: bytes | None) -> Result:
        owner = re.search(r"printf %s (.*) > ", self._script(argv))
        assert owner
        if self.layout.lock_owner in self.files:
            held = f"heartbeat 1000 {self.heartbeat_age}\n".encode()
            return reply(held + self.files[self.layout.lock_owner], exit_code=1)(argv, None)
        self.files[self.layout.lock_owner] = shlex.split(owner.group(1))[0].encode()
        self.events.append("lock")
        return reply()(argv, None)

    def _take_over(self, argv: Sequence[str], _: bytes | None) -> Result:
        quoted = re.findall(r"(?:= |printf %s )('(?:[^']|'\"'\"')*')", self._script(argv))
        stale, mine = quoted[0], quoted[-1]
        if self.files.get(self.layout.lock_owner, b"").decode() != shlex.split(stale)[0]:
            return reply(exit_code=1)(argv, None)
        self.files[self.layout.lock_owner] = shlex.split(mine)[0].encode()
        self.events.append("take over")
        return reply()(argv, None)

    def _release(self, argv: Sequence[str], _: bytes | None) -> Result:
        self.files.pop(self.layout.lock_owner, None)
        self.events.append("unlock")
        return reply()(argv, None)

    def _read_files(self, argv: Sequence[str], _: bytes | None) -> Result:
        out = b"".join(
            f"{p} {len(self.files[p])}\n".encode() + self.files[p]
            for p in self._paths(argv)
            if p in self.files
        )
        return reply(out)(argv, None)

    def _write(self, argv: Sequence[str], stdin: bytes | None) -> Result:
        path = re.search(r'mv -f "\$tmp" (\S+);', self._script(argv))
        assert path and stdin is not None
        self.files[path.group(1)] = stdin
        if path.group(1) == self.layout.journal:
            self.journal_steps.append(json.loads(stdin)["step"])
        return reply()(argv, None)

    def _remove(self, argv: Sequence[str], _: bytes | None) -> Result:
        self.files.pop(self._paths(argv)[0], None)
        self.events.append("journal cleared")
        return reply()(argv, None)

    def _link(self, argv: Sequence[str], _: bytes | None) -> Result:
        target, link = re.search(r"ln -sfn (\S+) (\S+)\.tmp;", self._script(argv)).groups()  # type: ignore[union-attr]
        self.links[link] = target
        return reply()(argv, None)

    def _list(self, argv: Sequence[str], _: bytes | None) -> Result:
        ids = sorted({p.split("/")[-2] for p in self.files if p.startswith(self.layout.releases)})
        return reply("".join(f"{n} {rid}\n" for n, rid in enumerate(ids)))(argv, None)

    def _start(self, argv: Sequence[str], _: bytes | None) -> Result:
        self.events.append(f"start {self.links.get(self.layout.current)}")
        return reply("4242 99 0")(argv, None)

    def _watch(self, argv: Sequence[str], _: bytes | None) -> Result:
        return reply(b"server 12\nrunning 4242tail 0\n")(argv, None)

    def _audit(self, argv: Sequence[str], _: bytes | None) -> Result:
        self.events.append("audit " + json.loads(shlex.split(self._script(argv))[2])["action"])
        return reply()(argv, None)

    def release(self, release_id: str, served_name: str) -> None:
        """A release on the container whose manifest records its own gate settings."""
        gate = GateTarget(served_name, 8000, FAST_GATE)
        manifest = {
            "release_id": release_id,
            "run_id": "run-before",
            "files": {},
            "gate_target": gate.to_dict(),
        }
        self.files[f"{self.layout.release(release_id)}/manifest.json"] = json.dumps(
            manifest
        ).encode()


def setup(served_name: str = "new-name") -> tuple[Playbook, TargetPlan, Container]:
    playbook = load_playbook(
        PLAYBOOK,
        [
            f"target.served_name={served_name}",
            "gate.min_drafts=50",
            "gate.probe.scrape_interval=0.02",
            "gate.probe.concurrency=1",
        ],
    )
    plan = plan_deploy(playbook, load_inventory(EXAMPLE))[0]
    return playbook, plan, Container(plan)


def target_run(
    playbook: Playbook, plan: TargetPlan, container: Container, cancel: Cancel | None = None
) -> TargetRun:
    options = Options(run_id="run-now", user="ops")
    return TargetRun(
        plan, container.transport, playbook, BUCKETS, "nvidia-smi", options, cancel=cancel
    )


def test_rollback_regates_the_old_release_with_its_own_served_name() -> None:
    playbook, plan, container = setup(served_name="new-name")
    container.release("aaaaaaaaaaaa", "old-name")
    container.release("bbbbbbbbbbbb", "new-name")
    container.links[container.layout.current] = "releases/bbbbbbbbbbbb"
    container.links[container.layout.previous] = "releases/aaaaaaaaaaaa"
    asked = serving(container.transport, "old-name")

    outcome = target_run(playbook, plan, container).rollback(None)

    assert outcome.result == "rolled_back", outcome.error
    assert set(asked) == {"old-name"}
    assert container.links[container.layout.current] == "releases/aaaaaaaaaaaa"
    assert container.links[container.layout.previous] == "releases/bbbbbbbbbbbb"
    assert container.journal_steps == [
        "begin",
        "stop server",
        "switch current",
        "start server",
        "wait ready",
        "gate",
        "gate passed",
    ]
    assert container.events == [
        "lock",
        "start releases/aaaaaaaaaaaa",
        "audit rollback",
        "journal cleared",
        "unlock",
    ]
    assert container.layout.journal not in container.files


def test_a_stop_request_during_the_gate_goes_back_to_the_previous_release() -> None:
    playbook, plan, container = setup(served_name="old-name")
    container.release("aaaaaaaaaaaa", "old-name")
    container.release("bbbbbbbbbbbb", "old-name")
    container.links[container.layout.current] = "releases/aaaaaaaaaaaa"
    serving(container.transport, "old-name")
    container.transport.on_http("GET", "/metrics", lambda _: (200, metrics(1)))  # undecided
    cancel = Cancel()
    threading.Timer(0.3, cancel.request, [15]).start()

    outcome = target_run(playbook, plan, container, cancel).rollback("bbbbbbbbbbbb")

    assert (outcome.result, outcome.exit_code, outcome.current) == (
        "interrupted",
        143,
        "aaaaaaaaaaaa",
    )
    assert container.links[container.layout.current] == "releases/aaaaaaaaaaaa"
    assert "rollback gate" in container.journal_steps
    assert container.events[-3:] == ["audit rollback", "journal cleared", "unlock"]


def dead_pid() -> int:
    done = subprocess.run(["true"], check=True)
    assert done.returncode == 0
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_dead_runs_lock_is_taken_over_and_its_ungated_switch_undone() -> None:
    playbook, plan, container = setup(served_name="old-name")
    container.release("aaaaaaaaaaaa", "old-name")
    container.release("bbbbbbbbbbbb", "old-name")
    container.links[container.layout.current] = "releases/bbbbbbbbbbbb"
    dead = Owner("run-dead", "ops", os.uname().nodename, dead_pid(), time.time())
    container.files[container.layout.lock_owner] = dead.to_json().encode()
    container.files[container.layout.journal] = json.dumps(
        {
            "run_id": "run-dead",
            "action": "deploy",
            "owner": str(dead),
            "from_release": "aaaaaaaaaaaa",
            "to_release": "bbbbbbbbbbbb",
            "step": "gate",
            "started": "t0",
            "updated": "t1",
        }
    ).encode()
    serving(container.transport, "old-name")

    outcome = target_run(playbook, plan, container).rollback("aaaaaaaaaaaa")

    assert outcome.recovered is not None
    assert (outcome.recovered["run_id"], outcome.recovered["back_on"]) == (
        "run-dead",
        "aaaaaaaaaaaa",
    )
    assert any("took over the deploy lock of run run-dead" in n for n in outcome.notes)
    assert any("recovered interrupted run run-dead" in n for n in outcome.notes)
    assert outcome.result == "unchanged"  # the recovery already put it back on aaaa...
    assert container.events[:4] == [
        "take over",
        "start releases/aaaaaaaaaaaa",
        "audit recover",
        "journal cleared",
    ]
    assert container.events[4:] == ["audit rollback", "unlock"]  # ...and the run names it
    assert container.layout.lock_owner not in container.files


def test_a_live_owner_on_another_host_is_refused_with_its_name() -> None:
    playbook, plan, container = setup()
    alive = Owner("run-alive", "alice", "elsewhere", 1, time.time())
    container.files[container.layout.lock_owner] = alive.to_json().encode()

    outcome = target_run(playbook, plan, container).rollback("aaaaaaaaaaaa")

    assert outcome.exit_code == 3
    assert "deploy lock held" in (outcome.error or "") and "alice" in (outcome.error or "")
    assert container.files[container.layout.lock_owner] == alive.to_json().encode()


def test_an_expired_lease_is_taken_over() -> None:
    playbook, plan, container = setup()
    playbook = playbook.model_copy(update={"lock_lease": 60.0})
    old = Owner("run-old", "alice", "elsewhere", 1, time.time())
    assert "heartbeat stopped 3600 s ago" in (old.gone(60.0, 3600) or "")
    assert old.gone(60.0, 59) is None  # a renewed heartbeat keeps a live owner's lock
    container.files[container.layout.lock_owner] = old.to_json().encode()
    container.heartbeat_age = 3600

    outcome = target_run(playbook, plan, container).rollback(None)

    assert "no previous release" in (outcome.error or "")
    assert container.events == ["take over", "unlock"]


def test_the_wait_for_gpu_memory_says_what_each_short_gpu_has_free() -> None:
    looks = iter([b"0, GPU-a, 49140, 48000, 1140\n", b"0, GPU-a, 49140, 100, 49040\n"])
    transport = MemoryTransport().on(
        "--query-gpu", lambda argv, _stdin: Result(tuple(argv), 0, next(looks), b"")
    )
    heard: list[str] = []
    wait_free(transport, "nvidia-smi", 1, 0.9, timeout=30, tick=heard.append)
    assert heard == ["GPU 0: 1140 of 49140 MiB free"]  # the second look found it free
