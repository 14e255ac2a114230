"""The server check of a release already on a container (`verify-config`, and the vLLM
version a baseline or a rollback fingerprints): the passing verdict kept on the container
is reused when it is of this launch on this install, as a deploy reuses it (preflight.py
keys it the same way: the launch with the release's drafter config staged where the
release has it, the model files, the install's identity); else the target's vLLM is asked.
`recheck` never reuses."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from orchestrator import preflight
from orchestrator.container import probe, store, validator, verdict
from orchestrator.container.shell import parse_frames, run_step
from orchestrator.layout import DRAFTER_CONFIG, LAUNCH_SCRIPT
from orchestrator.plan import TargetPlan
from orchestrator.serving.judge import Launch, read_launch
from orchestrator.transport.base import Transport


@dataclass(frozen=True)
class ReleaseFacts:
    """A release's launch, its model dirs as they are, and the verdict that may stand
    for a check of it (None: none kept of this launch and install, or `recheck`)."""

    launch: Launch
    target: preflight.ModelDir
    drafter: preflight.ModelDir | None
    kept: verdict.Verdict | None


def read(
    transport: Transport,
    plan: TargetPlan,
    release_id: str,
    script: bytes | None,
    config: bytes | None,
    recheck: bool,
) -> ReleaseFacts:
    """In one round trip: both model dirs and, for a launch of `vllm serve`, the kept
    verdict with the install's identity (probe.launch_facts)."""
    launch = read_launch((script or b"").decode("utf-8", "replace"), release_id)
    frames = parse_frames(
        run_step(
            transport,
            probe.launch_facts(plan.layout, preflight.launch_read(plan, launch.executable)),
            "read the release's model dirs",
            timeout=120,
        ).stdout
    )
    target, drafter = preflight.model_dirs_read(plan, frames)
    kept = None
    if launch.executable and not recheck:
        files = plan.files if config is None else {**plan.files, DRAFTER_CONFIG: config}
        deployed = dataclasses.replace(plan, release_id=release_id, files=files)
        payload = preflight.server_request(deployed, launch)
        key = preflight.verdict_key(payload, frames.get(verdict.INSTALL), target, drafter)
        kept = verdict.reusable(frames.get(verdict.VERDICT), key)
    return ReleaseFacts(launch, target, drafter, kept)


def read_release(
    transport: Transport, plan: TargetPlan, release_id: str, recheck: bool
) -> ReleaseFacts:
    """`read` for the release as its own files say (its launch script, its drafter config)."""
    files = store.read_back(
        transport, plan.layout.release(release_id), [LAUNCH_SCRIPT, DRAFTER_CONFIG]
    )
    return read(
        transport, plan, release_id, files.get(LAUNCH_SCRIPT), files.get(DRAFTER_CONFIG), recheck
    )


def check(transport: Transport, plan: TargetPlan, facts: ReleaseFacts) -> validator.ServerCheck:
    """The kept verdict, else the target's vLLM over the launch: the release's files are
    where the launch names them, nothing is staged."""
    if facts.kept is not None:
        return facts.kept.as_check()
    launch = facts.launch
    return validator.check(transport, plan.vllm, validator.request(launch.argv, launch.env, {}))
