"""The playbook's `gate.speed`: the concurrency the server will see in production,
the levels the gate measures speed at, and how a release's speed is judged against
its reference (a baseline without speculation, or the release it replaces)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from orchestrator.schema import Fraction, Schema

Streams = Annotated[int, Field(ge=1, le=256)]


class Speed(Schema):
    """Speed at the concurrency the server will see: per-stream decode speed and the
    server's total output tokens per second, each with a confidence bound over
    independent requests (`gate.confidence`), at each level of concurrent streams,
    once the acceptance phases passed, within a `gate.time_budget` of its own."""

    enabled: bool = Field(
        default=True,
        description="Measure speed once the acceptance phases passed. `false` skips it: "
        "the gate then says nothing on whether speculation pays.",
    )
    production_concurrency: Streams = Field(
        default=8,
        description="The concurrent streams the server will see in production: this is "
        "where the playbook states it. The cost of verifying drafts grows with the streams "
        "in a batch, so speed is measured there as well as at one stream.",
    )
    concurrency: Annotated[list[Streams], Field(min_length=1, max_length=8)] | None = Field(
        default=None,
        description="Levels of concurrent streams the gate measures at. Unset: 1 and "
        "`production_concurrency`.",
    )
    max_tokens: Annotated[int, Field(ge=2, le=4096)] = Field(
        default=64,
        description="`max_tokens` of each speed request (streamed `/v1/completions`): "
        "its decode time runs from the first token to the last.",
    )
    max_requests: Annotated[int, Field(ge=2, le=10_000)] = Field(
        default=64,
        description="Most requests per level. A level stops earlier once the bound of its "
        "total tokens/s (the figure the verdict judges) is within `precision` of its mean; "
        "one that spends this first keeps the bounds it reached.",
    )
    precision: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.1,
        description="Relative half-width (half the bound's width over the mean) at which "
        "a level has measured enough and stops sending requests.",
    )
    min_speedup: Annotated[float, Field(gt=0, le=100)] = Field(
        default=1.0,
        description="Against a baseline (the target served without speculation): a level "
        "fails when its speedup's upper bound is below this (provably slower than "
        "allowed), and passes otherwise. 1.0: a release provably slower than serving "
        "without speculation fails.",
    )
    max_regression: Fraction = Field(
        default=0.25,
        description="Against the release it replaces (no baseline, or one whose "
        "fingerprint no longer matches): the largest slowdown allowed. A level fails when "
        "its speedup's upper bound is below 1 - this. The replaced release was measured at "
        "another time, under whatever else its host was doing then, which the bounds of "
        "one run do not hold: on a shared host the same server measured 10-35% apart "
        "between runs.",
    )
    max_foreign_share: Fraction = Field(
        default=0.25,
        description="Share of the measured batch (`vllm:num_requests_running`, read "
        "during the level) that may be other clients' requests; above it the level's "
        "speed is inconclusive, never a pass.",
    )

    @model_validator(mode="after")
    def _distinct_levels(self) -> Speed:
        if self.concurrency is not None and len(set(self.concurrency)) != len(self.concurrency):
            raise ValueError(f"concurrency levels repeat: {self.concurrency}")
        return self

    def levels(self) -> list[int]:
        """The levels measured, ascending."""
        return sorted(set(self.concurrency or [1, self.production_concurrency]))
