"""What the speed reference is chosen from, read off the container: the baseline record,
the fingerprint now (from preflight's facts, or read for a run without preflight), the
audit's last lines (orchestrator/baseline.py chooses; this module only reads)."""

from __future__ import annotations

from orchestrator import preflight, release_check
from orchestrator.baseline import (
    Fingerprint,
    ReferenceFacts,
    fingerprint_of,
    gpus_text,
    launch_without_speculation,
    parse_record,
)
from orchestrator.container import probe, store
from orchestrator.container.audit import STATUS_TAIL
from orchestrator.container.gpu import Gpu, parse_gpus
from orchestrator.container.shell import parse_frames, read_whole, run_step
from orchestrator.errors import InputError, OrchError
from orchestrator.layout import LAUNCH_SCRIPT
from orchestrator.plan import TargetPlan
from orchestrator.transaction.deployment import Deployment

FINGERPRINTED_TARGET_FILES = (preflight.CONFIG_FILE, preflight.INDEX_FILE)


def baseline_launch(plan: TargetPlan, template: str) -> str:
    """The plan's launch script without its speculative config (InputError: a template
    that cannot be served so)."""
    try:
        return launch_without_speculation(
            plan.files[LAUNCH_SCRIPT].decode("utf-8", "replace"), f"template {template}"
        )
    except ValueError as exc:
        raise InputError(f"{plan.playbook}: the launch without speculation: {exc}") from None


def fingerprint(
    d: Deployment, target: preflight.ModelDir, version: str | None, gpus: list[Gpu] | None
) -> Fingerprint | None:
    """The plan's fingerprint from what preflight reads (None: a launch that cannot be
    served without speculation has none)."""
    try:
        launch = baseline_launch(d.plan, d.playbook.server.template)
    except InputError:
        return None
    files = {n: target.frames[n] for n in FINGERPRINTED_TARGET_FILES if n in target.frames}
    named = [(g.name, g.total_mib) for g in gpus] if gpus is not None else None
    return fingerprint_of(files, version, launch, gpus_text(named))


def read_fingerprint(d: Deployment, served: str | None = None) -> Fingerprint | None:
    """The fingerprint for a run without preflight (rollback, baseline): the target's
    files, nvidia-smi's GPUs and the vLLM version: the one the kept verdict on the launch
    of release `served` (default: the current one) says while the install is unchanged
    (release_check.py; never with `--recheck`), else `vllm --version`'s, which imports
    vLLM. None when any cannot be read."""
    try:
        served = served or store.linked(d.transport, d.layout.current)
        facts = (
            release_check.read_release(d.transport, d.plan, served, d.options.recheck)
            if served
            else None
        )
        target = facts.target if facts else preflight.read_model_dir(d.transport, d.plan.target_dir)
        small = parse_frames(
            run_step(
                d.transport, probe.target_facts(d.layout, d.nvidia_smi), "read target facts"
            ).stdout
        )
        gpus = parse_gpus(small["gpus"].decode()) if small.get("gpus.rc") == b"0" else None
        kept = facts.kept.reply.version if facts and facts.kept else ""
        version = kept if probe.is_version(kept) else _version_said(d)
    except (OrchError, KeyError):
        return None
    return fingerprint(d, target, version, gpus)


def _version_said(d: Deployment) -> str | None:
    said = d.transport.run(probe.read_vllm_version(d.plan.vllm), timeout=120)
    version, _ = probe.parse_vllm_version(said.stdout.decode("utf-8", "replace"), said.exit_code)
    return version


def read_facts(d: Deployment, now: Fingerprint | None) -> ReferenceFacts:
    """The baseline record and the audit's last lines, in one round trip."""
    layout = d.layout
    found = read_whole(d.transport, [layout.baseline, layout.audit_log], "read the baseline")
    record = found.get(layout.baseline)
    lines = found.get(layout.audit_log, b"").decode("utf-8", "replace").splitlines()
    return ReferenceFacts(
        parse_record(record) if record is not None else None, now, tuple(lines[-STATUS_TAIL:])
    )
