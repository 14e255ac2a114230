"""vLLM's speculative-decoding counters, read from a /metrics body (Prometheus text).

Three outcomes, kept apart: counters (measured), None (the server exposes no
speculative-decoding series: it is not drafting), MetricsFormatError (the body
could not be read as counters: nothing was measured).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from orchestrator.metrics.figures import MAX_COUNT, is_count, is_finite, shown

# prometheus-client names a counter's family without `_total` and its samples with it;
# matching sample names also reads bodies without TYPE lines.
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
DRAFTS_CREATED = "vllm:spec_decode_num_drafts_created"
RUNNING = "vllm:num_requests_running"
TOTALS = (DRAFTS, DRAFT_TOKENS, ACCEPTED)
EXCERPT_CHARS = 80
ACCEPT = "text/plain; version=0.0.4"
"""Asked for explicitly, though vLLM's /metrics answers the classic text format whatever
the Accept header (docs/field-notes/vllm-versions.md): an exporter that negotiates would
escape the `:` of the names in OpenMetrics."""


class MetricsFormatError(ValueError):
    """The /metrics body could not be read as vLLM's counters: nothing was measured."""


@dataclass(frozen=True)
class SpecDecodeCounters:
    """Cumulative counters of one server, summed over its engines.

    accepted_per_pos[i] counts the drafts that accepted at least i+1 tokens.
    `created` is the latest creation time of the drafts counter (a restart moves
    it), None when the server does not expose `_created` samples.
    """

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_pos: tuple[int, ...]
    created: float | None = None


def parse_spec_decode(text: str) -> SpecDecodeCounters | None:
    """The server's speculative-decoding counters, or None when it exposes none."""
    totals: dict[str, int] = defaultdict(int)
    per_position: dict[int, int] = defaultdict(int)
    created: list[float] = []
    for sample in _samples(text):
        if sample.name in TOTALS:
            totals[sample.name] += _count(sample)
        elif sample.name == ACCEPTED_PER_POS:
            per_position[_position(sample)] += _count(sample)
        elif sample.name == DRAFTS_CREATED:
            created.append(_time(sample))
    if not totals and not per_position:
        return None
    for name, total in [*totals.items(), *((ACCEPTED_PER_POS, n) for n in per_position.values())]:
        _bounded_sum(name, total)
    missing = [name for name in TOTALS if name not in totals]
    if missing:
        raise MetricsFormatError(f"incomplete speculative-decoding series: no {', '.join(missing)}")
    if sorted(per_position) != list(range(len(per_position))):
        raise MetricsFormatError(
            f"{ACCEPTED_PER_POS} positions {sorted(per_position)} are not 0..k-1"
        )
    counters = SpecDecodeCounters(
        drafts=totals[DRAFTS],
        draft_tokens=totals[DRAFT_TOKENS],
        accepted=totals[ACCEPTED],
        accepted_per_pos=tuple(per_position[i] for i in range(len(per_position))),
        created=max(created, default=None),
    )
    problems = contradictions(counters)
    if problems:
        raise MetricsFormatError("counters contradict each other: " + "; ".join(problems))
    return counters


def parse_running(text: str) -> int | None:
    """Requests in the server's running batch, summed over its engines (None: the
    server exposes no such gauge)."""
    counts = [_count(sample) for sample in _samples(text) if sample.name == RUNNING]
    return _bounded_sum(RUNNING, sum(counts)) if counts else None


def contradictions(counters: SpecDecodeCounters) -> list[str]:
    """What breaks vLLM's invariants; it counts each draft in every counter at once."""
    at_least = (counters.drafts, *counters.accepted_per_pos)
    problems = []
    if any(later > earlier for earlier, later in pairwise(at_least)):
        problems.append(f"drafts and per-position counts {at_least} are not non-increasing")
    if sum(counters.accepted_per_pos) != counters.accepted:
        problems.append(
            f"per-position counts add up to {sum(counters.accepted_per_pos)},"
            f" accepted tokens are {counters.accepted}"
        )
    if counters.accepted > counters.draft_tokens:
        problems.append(
            f"accepted tokens {counters.accepted} exceed draft tokens {counters.draft_tokens}"
        )
    return problems


def _samples(text: str) -> Iterator[Sample]:
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, IndexError) as error:
        raise MetricsFormatError(
            f"not Prometheus text ({error}): {text[:EXCERPT_CHARS]!r}"
        ) from error
    for family in families:
        yield from family.samples


def _count(sample: Sample) -> int:
    value = sample.value  # prometheus-client gives an int for "100", a float for "100.0"
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not is_count(value):
        raise MetricsFormatError(
            f"{sample.name}{sample.labels} = {shown(value)} is not a count (0..{MAX_COUNT})"
        )
    return int(value)


def _bounded_sum(name: str, total: int) -> int:
    """A count summed over engines, still within the counts' range."""
    if not is_count(total):
        raise MetricsFormatError(
            f"{name} summed over the engines is {shown(total)}, beyond a count (0..{MAX_COUNT})"
        )
    return total


def _time(sample: Sample) -> float:
    if not is_finite(sample.value):
        raise MetricsFormatError(
            f"{sample.name}{sample.labels} = {shown(sample.value)} is not a time"
        )
    return float(sample.value)


def _position(sample: Sample) -> int:
    label = sample.labels.get("position", "")
    if not label.isdigit():
        raise MetricsFormatError(f"{sample.name}{sample.labels} has no numeric position label")
    return int(label)
