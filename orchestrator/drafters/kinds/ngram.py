"""N-gram (prompt lookup): drafts copied from earlier text of the request, no model.

The baseline a team compares a trained drafter against. vLLM fills
`prompt_lookup_min`/`prompt_lookup_max` with 5 when neither is given
(vllm/config/speculative.py); orch passes neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.drafters.kinds import CheckInputs, DrafterKind
from orchestrator.metrics.assess import FailureCauses

if TYPE_CHECKING:
    from orchestrator.drafters.findings import Finding
    from orchestrator.drafters.profiles import Profile


class Ngram(DrafterKind):
    """Prompt-lookup drafting: nothing to load, nothing to misconfigure on the target."""

    name = "ngram"
    needs_drafter_dir = False
    key_fields = ()
    failure_causes = FailureCauses(
        misaligned="the probe traffic: n-gram drafts only where the output repeats the prompt",
        shallow="the probe traffic and num_speculative_tokens",
    )

    def recognises(self, config: dict) -> bool:
        return False

    def check(self, inputs: CheckInputs) -> list[Finding]:
        return []

    def describe(self, profile: Profile) -> dict[str, object]:
        return {}


KIND = Ngram()
