"""The baseline: a target's speed served without speculation, recorded on the container
with a fingerprint of what it depends on, and the choice of the reference a gate judges
a release's speed by (the baseline, else the release being replaced, else none).

The record (`baseline.json` in the deployment's directory, Layout.baseline):

    {"fingerprint": {"target": "3f2a...", "vllm": "0.32.0",
                     "launch": "9c1e...", "gpus": "2 x NVIDIA RTX A6000 (49140 MiB)"},
     "levels": [{"concurrency": 1, "requests": 12,
                 "per_stream_tokens_per_second": {"mean": 41.2, "lower": 39.0, "upper": 43.1},
                 "total_tokens_per_second": {...}, "batch_measured": 1.0}],
     "run_id": "...", "time": "2026-12-04T16:40:09+00:00", "release": "9a1f..."}

`release` is the gated release that was serving (the launch it was measured beside).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from orchestrator.container import audit
from orchestrator.metrics.speed import Figure
from orchestrator.metrics.speedup import NO_REFERENCE, ReferenceLevel, SpeedReference

BASELINE_PREFIX = "baseline-"
"""The baseline server's release-like directory: `releases/baseline-<digest>`, pointed
at by `current` only while the baseline is measured, pruned when it ends."""
SPECULATION_FLAGS = ("--speculative-config", "--per-request-spec-decode-metrics")
"""The launch's flags that only speculation needs: the baseline's launch has neither."""


@pydantic.dataclasses.dataclass(frozen=True)
class Fingerprint:
    """What a baseline's figures depend on. `target` and `launch` are digests (the
    target's config.json and weight index as preflight reads them; the launch script
    minus the speculative config), `vllm` the server's version, `gpus` nvidia-smi's
    GPUs: how many of each name and memory (`gpus_text`)."""

    target: str
    vllm: str
    launch: str
    gpus: str


@pydantic.dataclasses.dataclass(frozen=True)
class BaselineLevel:
    """One level as the baseline measured it."""

    concurrency: int
    requests: int
    per_stream_tokens_per_second: Figure | None
    total_tokens_per_second: Figure | None
    batch_measured: float | None


@pydantic.dataclasses.dataclass(frozen=True)
class BaselineRecord:
    fingerprint: Fingerprint
    levels: tuple[BaselineLevel, ...]
    run_id: str
    time: str
    release: str

    def reference(self) -> SpeedReference:
        measured = [lv for lv in self.levels if lv.total_tokens_per_second is not None]
        return SpeedReference(
            "baseline",
            f"measured {self.time} by run {self.run_id}",
            tuple(ReferenceLevel(lv.concurrency, lv.total_tokens_per_second) for lv in measured),  # type: ignore[arg-type]
        )


RECORD = pydantic.TypeAdapter(BaselineRecord)


def record_json(record: BaselineRecord) -> bytes:
    return json.dumps(RECORD.dump_python(record, mode="json"), indent=2, sort_keys=True).encode()


def parse_record(data: bytes) -> BaselineRecord | str:
    """The record, or what is wrong with it (a torn or hand-edited file is no baseline)."""
    try:
        return RECORD.validate_json(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        return f"{where}: {first['msg']}"


def is_baseline(release_id: str | None) -> bool:
    return bool(release_id and release_id.startswith(BASELINE_PREFIX))


def digest(*parts: bytes) -> str:
    hashed = hashlib.sha256()
    for part in parts:
        hashed.update(len(part).to_bytes(8, "big") + part)
    return hashed.hexdigest()[:16]


def launch_without_speculation(launch: str, where: str) -> str:
    """The launch script with its speculation flags' lines left out (each is a line of
    its own in templates/vllm/serve.sh.j2). A template that puts one elsewhere cannot be
    served without speculation this way: ValueError naming `where`."""
    kept = [
        line
        for line in launch.splitlines(keepends=True)
        if not line.lstrip().startswith(SPECULATION_FLAGS)
    ]
    without = "".join(kept)
    left = [flag for flag in SPECULATION_FLAGS if flag in without]
    if left:
        raise ValueError(f"{where}: {left[0]} is not on a line of its own")
    return without


def gpus_text(gpus: Sequence[tuple[str, int]] | None) -> str:
    """nvidia-smi's GPUs (name, memory in MiB) as the fingerprint names them: how many of
    each, in the order listed, e.g. `2 x NVIDIA RTX A6000 (49140 MiB)`."""
    if gpus is None:
        return "not read"
    if not gpus:
        return "none"
    counted = Counter(gpus)
    return ", ".join(f"{n} x {name or 'unnamed'} ({mib} MiB)" for (name, mib), n in counted.items())


def fingerprint_of(
    target_files: Mapping[str, bytes], vllm: str | None, launch: str, gpus: str
) -> Fingerprint:
    """`target_files`: the target's config.json and weight index, by name."""
    target = digest(*(n.encode() + b"\0" + target_files[n] for n in sorted(target_files)))
    return Fingerprint(target, vllm or "unknown", digest(launch.encode()), gpus)


def changed_part(recorded: Fingerprint, now: Fingerprint) -> str | None:
    """The first part that changed since the baseline, in words; None: none did."""
    if recorded.vllm != now.vllm:
        return f"baseline measured for vLLM {recorded.vllm}, the server is {now.vllm}"
    if recorded.target != now.target:
        return (
            f"baseline measured for target files {recorded.target} (config and weight "
            f"index), they are now {now.target}"
        )
    if recorded.launch != now.launch:
        return (
            f"baseline measured with launch {recorded.launch} (minus speculation), the "
            f"launch is now {now.launch}"
        )
    if recorded.gpus != now.gpus:
        return (
            f"the GPUs changed: baseline measured on {recorded.gpus}, nvidia-smi now "
            f"lists {now.gpus}"
        )
    return None


@dataclass(frozen=True)
class ReferenceChoice:
    """The reference a gate judges speed by (None: recorded, not judged), and why."""

    reference: SpeedReference | None
    why: str


@dataclass(frozen=True)
class ReferenceFacts:
    """What the choice reads: the baseline record (or why there is none to read), the
    fingerprint now (None: not read), and the audit's gate of each earlier release."""

    baseline: BaselineRecord | str | None
    fingerprint: Fingerprint | None
    audit: Sequence[str]
    """The container's last audit lines: the gate that admitted each earlier release."""


def choose_reference(facts: ReferenceFacts, gated: str, replaced: str | None) -> ReferenceChoice:
    """A baseline whose fingerprint matches; else the release being replaced, from the
    speed figures of the gate that admitted it (never a release against itself); else
    none. `why` says which and, when the baseline was passed over, what changed."""
    baseline, now = facts.baseline, facts.fingerprint
    if isinstance(baseline, BaselineRecord) and now is not None:
        changed = changed_part(baseline.fingerprint, now)
        if changed is None:
            return ReferenceChoice(
                baseline.reference(),
                f"baseline of run {baseline.run_id}: its fingerprint matches "
                f"(vLLM {now.vllm}, target, launch, GPUs {now.gpus})",
            )
        passed_over = changed
    elif isinstance(baseline, BaselineRecord):
        passed_over = "baseline not compared: the fingerprint was not read"
    elif isinstance(baseline, str):
        passed_over = f"baseline record unreadable ({baseline})"
    else:
        passed_over = "no baseline recorded"
    if not replaced or replaced == gated:
        return ReferenceChoice(None, f"{passed_over}; no release replaced: {NO_REFERENCE}")
    gate = audit.release_gate(list(facts.audit), replaced)
    levels = replaced_levels(gate)
    if not levels:
        return ReferenceChoice(
            None,
            f"{passed_over}; the replaced release {replaced} has no recorded speed: {NO_REFERENCE}",
        )
    run = (gate or {}).get("run_id") or "unknown"
    return ReferenceChoice(
        SpeedReference("replaced_release", f"{replaced} (gated by run {run})", levels),
        f"{passed_over}: judged against the release it replaces, {replaced}",
    )


FIGURE = pydantic.TypeAdapter(Figure)


def replaced_levels(gate: Mapping[str, Any] | None) -> tuple[ReferenceLevel, ...]:
    """The total tokens/s per level of a recorded gate's speed (audit.speed_record);
    a level without a readable figure is left out."""
    speed = (gate or {}).get("speed")
    if not isinstance(speed, Mapping):
        return ()
    levels = []
    for level in speed.get("levels") or []:
        try:
            total = FIGURE.validate_python(level["total_tokens_per_second"])
            levels.append(ReferenceLevel(int(level["concurrency"]), total))
        except (pydantic.ValidationError, KeyError, TypeError, ValueError):
            continue
    return tuple(levels)
