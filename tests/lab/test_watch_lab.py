"""`orch watch` on the lab: live acceptance from the servers' counters while traffic
runs, and a container whose drafts degrade at runtime marked below and named."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from labtools import ALL_AT_ONCE, FAST, LabHandle

from orchestrator.contract import Document
from orchestrator.fleet.inputs import load

pytestmark = pytest.mark.lab

WATCH = ["--interval", "0.5", "--window", "4s", "--set", "gate.min_drafts=100"]


@contextmanager
def traffic(handle: LabHandle, streams: int = 2) -> Iterator[None]:
    """Greedy requests (as the gate's probes) to every server, `streams` at a time each,
    until the block ends. Sampled traffic accepts less: the watch reports what it gets."""
    stop = threading.Event()

    def client(url: str, model: str) -> None:
        greedy = {"temperature": 0.0, "top_p": 1.0, "top_k": 0}
        body = json.dumps({"model": model, "prompt": "the draft", "max_tokens": 24, **greedy})
        while not stop.is_set():
            request = urllib.request.Request(
                url, body.encode(), {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()

    inputs = load("qwen-dflash", handle.inventory, [], [])
    model = inputs.playbook.target.served_name
    threads = [
        threading.Thread(
            target=client, args=(f"http://{p.address}:{p.port}/v1/completions", model), daemon=True
        )
        for p in inputs.plans
        for _ in range(streams)
    ]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)


def test_watch_once_passes_then_names_the_degraded_container(lab: LabHandle) -> None:
    inventory = str(lab.inventory)
    deployed = lab.orch("deploy", "qwen-dflash", "-i", inventory, *FAST, *ALL_AT_ONCE)
    assert deployed.code == 0, deployed.stderr[-2000:]
    names = [c.name for c in lab.lab.containers()]
    with traffic(lab):
        healthy = lab.orch("watch", "qwen-dflash", "-i", inventory, "--once", "--json", *WATCH)
        assert healthy.code == 0, healthy.stdout + healthy.stderr[-2000:]
        document = json.loads(healthy.stdout)
        assert (document["kind"], document["api_version"]) == ("Watch", "orch/v1")
        Document.model_validate(document)
        by_name = {t["name"]: t for t in document["targets"]}
        assert sorted(by_name) == sorted(names)
        for target in by_name.values():
            assert target["acceptance"] == "ok", target
            assert target["mean_acceptance_length"] > 3.0
            assert target["position1_acceptance"] > 0.6
            assert target["drafts_per_second"] > 0
            assert target["drafts"] >= 100

        degraded = names[-1]
        lab.lab.set_acceptance(degraded, 0.3)
        below = lab.orch("watch", "qwen-dflash", "-i", inventory, "--once", *WATCH)
    assert below.code == 1, below.stdout + below.stderr[-2000:]
    lines = {line.split()[0]: line for line in below.stdout.splitlines()}
    assert "BELOW" in lines[degraded], below.stdout
    assert "mean acceptance length" in lines[degraded]
    others = [name for name in names if name != degraded]
    assert all(lines[name].split()[1] == "ok" for name in others), below.stdout
