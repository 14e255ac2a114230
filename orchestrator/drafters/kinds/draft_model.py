"""A small model of the target's family as the drafter (vLLM's draft_model method).

vLLM loads the drafter with the target's tokenizer (unless
`use_heterogeneous_vocab`), so the two must agree on token ids: same
vocabulary size, and in practice the same model family.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs, DrafterKind
from orchestrator.drafters.modelfiles import text_config
from orchestrator.metrics.assess import FailureCauses

if TYPE_CHECKING:
    from orchestrator.drafters.profiles import Profile


class DraftModel(DrafterKind):
    """An ordinary causal LM drafting for a larger one."""

    name = "draft_model"
    key_fields = ()
    failure_causes = FailureCauses(
        misaligned="that drafter and target share the tokenizer (vocab_size, model family)",
        shallow="how close the drafter's outputs are to the target's (a larger drafter, "
        "or fewer num_speculative_tokens)",
    )

    def recognises(self, config: dict) -> bool:
        return False  # any causal LM: named in the playbook, never guessed

    def check(self, inputs: CheckInputs) -> list[Finding]:
        return list(self._rules(inputs))

    def describe(self, profile: Profile) -> dict[str, object]:
        return {"model_type": text_config(profile.config).get("model_type")}

    def _rules(self, c: CheckInputs) -> Iterator[Finding]:
        drafter, target = text_config(c.drafter), text_config(c.target)
        if drafter.get("vocab_size") != target.get("vocab_size"):
            yield Finding.error(
                "vocab_size",
                "the drafter's vocabulary differs from the target's: vLLM drafts with the "
                "target's tokenizer, so token ids disagree; use a drafter of the same family",
                expected=target.get("vocab_size"),
                actual=drafter.get("vocab_size"),
            )
        family, target_family = drafter.get("model_type"), target.get("model_type")
        if family != target_family:
            yield Finding.warning(
                "model_type",
                "the drafter is of another model family than the target: check that they "
                "share the tokenizer",
                expected=target_family,
                actual=family,
            )


KIND = DraftModel()
