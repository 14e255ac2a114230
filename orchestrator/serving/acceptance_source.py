"""Which acceptance figures a launch on a given vLLM can give the gate, for
`gate.acceptance_source`: per-request figures need `--per-request-spec-decode-metrics`,
an unknown flag before vLLM 0.29.0 (the capability table's
`per_request_spec_decode_metrics`), which refuses the launch; /metrics counters every
release serves, but they count every request the server handles."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.serving.capabilities import (
    Table,
    UnknownVersion,
    capabilities_for,
    first_release_where,
    load_table,
)
from orchestrator.serving.judge import PER_REQUEST_FLAG

AUTO = "gate.acceptance_source: auto"
COUNTED = (
    "/metrics counters count every request the server handles: other clients' drafts "
    "enter the figures"
)


@dataclass(frozen=True)
class SourceChoice:
    """Whether the launch asks for per-request figures, and why, in the report's words."""

    per_request: bool
    why: str


def auto_source(version: str | None, table: Table | None = None) -> SourceChoice:
    """`gate.acceptance_source: auto` for a server of vLLM `version` (None: not read):
    per-request figures unless the table says this release has no flag for them; a
    version it cannot place keeps them (the gate still falls back to counters when the
    responses carry none)."""
    table = table or load_table()
    try:
        found = capabilities_for(version, table) if version else None
    except UnknownVersion:
        found = None
    if found is None:
        unknown = f"{AUTO}, the vLLM version unknown: launched with {PER_REQUEST_FLAG}"
        return SourceChoice(True, unknown)
    cited = found.row.sources.get("per_request_spec_decode_metrics", "")
    if found.row.per_request_spec_decode_metrics:
        return SourceChoice(True, f"{AUTO}: vLLM {found.version} has {PER_REQUEST_FLAG} ({cited})")
    first = first_release_where(lambda r: r.per_request_spec_decode_metrics, found.version, table)
    return SourceChoice(
        False,
        f"{AUTO}: vLLM {found.version} has no {PER_REQUEST_FLAG} ({cited}; first in "
        f"{first}), so the launch goes without it and the gate reads /metrics counter "
        f"deltas; {COUNTED}",
    )
