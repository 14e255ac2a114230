"""EAGLE-3 drafters in the speculators format: a drafter dir that ships its own config.json.

vLLM reads a speculators config (`speculators_model_type: eagle3`) through
`SpeculatorsConfig`: the drafter's layer from `transformer_layer_config`, the
target layers it reads from `eagle_aux_hidden_state_layer_ids`, and the
verifier (the target it was trained for) and its trained number of steps
from `speculators_config`. These rules check that against the target.
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

SPECULATORS_TYPE = "eagle3"
LAYER_IDS = "eagle_aux_hidden_state_layer_ids"
VERIFIER = "speculators_config.verifier.name_or_path"


def verifier(config: dict) -> dict:
    speculators = config.get("speculators_config")
    found = speculators.get("verifier") if isinstance(speculators, dict) else None
    return found if isinstance(found, dict) else {}


def trained_steps(config: dict) -> int | None:
    """The speculative tokens of the first proposal method: what the drafter was trained for."""
    speculators = config.get("speculators_config")
    methods = speculators.get("proposal_methods") if isinstance(speculators, dict) else None
    if isinstance(methods, list) and methods and isinstance(methods[0], dict):
        steps = methods[0].get("speculative_tokens")
        return steps if isinstance(steps, int) else None
    return None


def _layer(config: dict) -> dict:
    layer = config.get("transformer_layer_config")
    return layer if isinstance(layer, dict) else {}


class Eagle3(DrafterKind):
    """EAGLE-3 heads trained with vllm-project/speculators."""

    name = "eagle3"
    key_fields = (
        "speculators_model_type",
        "speculators_config",
        "transformer_layer_config",
        LAYER_IDS,
        "draft_vocab_size",
        "target_hidden_size",
    )
    failure_causes = FailureCauses(
        misaligned=f"{LAYER_IDS} and {VERIFIER} (the target the head was trained for)",
        shallow="num_speculative_tokens against the steps the head was trained for "
        "(speculators_config.proposal_methods[0].speculative_tokens)",
    )

    def recognises(self, config: dict) -> bool:
        return config.get("speculators_model_type") == SPECULATORS_TYPE

    def check(self, inputs: CheckInputs) -> list[Finding]:
        return [
            *self._format(inputs),
            *self._verifier(inputs),
            *self._dimensions(inputs),
            *self._layer_ids(inputs),
            *self._steps(inputs),
        ]

    def describe(self, profile: Profile) -> dict[str, object]:
        return {
            "verifier": verifier(profile.config).get("name_or_path"),
            "speculative_tokens": trained_steps(profile.config),
        }

    def _format(self, c: CheckInputs) -> Iterator[Finding]:
        if not self.recognises(c.drafter):
            yield Finding.error(
                "speculators_model_type",
                "not an EAGLE-3 drafter in the speculators format: vLLM reads its config "
                "through speculators_model_type eagle3 and speculators_config",
                expected=SPECULATORS_TYPE,
                actual=c.drafter.get("speculators_model_type"),
            )

    def _verifier(self, c: CheckInputs) -> Iterator[Finding]:
        named = verifier(c.drafter).get("name_or_path")
        if c.profile is not None and named != c.profile.target_name:
            yield Finding.error(
                VERIFIER,
                f"the head was trained for {named!r}, not {c.profile.target_name}: it only "
                "drafts well for the target it was trained on",
                expected=c.profile.target_name,
                actual=named,
            )
        trained_on = verifier(c.drafter).get("architectures")
        target_on = c.target.get("architectures")
        if trained_on and target_on and trained_on != target_on:
            yield Finding.error(
                "speculators_config.verifier.architectures",
                "the head was trained for another model class than this target's",
                expected=target_on,
                actual=trained_on,
            )

    def _dimensions(self, c: CheckInputs) -> Iterator[Finding]:
        target, layer = text_config(c.target), _layer(c.drafter)
        reads = c.drafter.get("target_hidden_size") or layer.get("hidden_size")
        if reads != target.get("hidden_size"):
            yield Finding.error(
                "target_hidden_size",
                "the head reads hidden states of another width than the target's hidden_size "
                "(target_hidden_size, else transformer_layer_config.hidden_size): vLLM cannot "
                "load it for this target",
                expected=target.get("hidden_size"),
                actual=reads,
            )
        if layer.get("vocab_size") != target.get("vocab_size"):
            yield Finding.error(
                "transformer_layer_config.vocab_size",
                "the head embeds another vocabulary than the target's: token ids disagree",
                expected=target.get("vocab_size"),
                actual=layer.get("vocab_size"),
            )
        draft_vocab = c.drafter.get("draft_vocab_size")
        vocab = target.get("vocab_size")
        if isinstance(draft_vocab, int) and isinstance(vocab, int) and draft_vocab > vocab:
            yield Finding.error(
                "draft_vocab_size",
                "draft_vocab_size exceeds the target's vocabulary",
                expected=f"<= {vocab}",
                actual=draft_vocab,
            )

    def _layer_ids(self, c: CheckInputs) -> Iterator[Finding]:
        ids = c.drafter.get(LAYER_IDS)
        layers = text_config(c.target).get("num_hidden_layers")
        if not ids:
            yield Finding.warning(
                LAYER_IDS,
                f"{LAYER_IDS} is not set: vLLM falls back to the target model's default "
                "auxiliary layers, and acceptance is low if the head was trained on others",
                actual=ids,
            )
        elif isinstance(layers, int) and any(
            not isinstance(i, int) or not 0 <= i < layers for i in ids
        ):
            yield Finding.error(
                LAYER_IDS,
                f"{LAYER_IDS} name layers outside the target's 0..{layers - 1}",
                expected=f"ids in 0..{layers - 1}",
                actual=ids,
            )

    def _steps(self, c: CheckInputs) -> Iterator[Finding]:
        trained, wanted = trained_steps(c.drafter), c.num_speculative_tokens
        if trained is not None and wanted is not None and wanted > trained:
            yield Finding.warning(
                "num_speculative_tokens",
                f"num_speculative_tokens {wanted} exceeds the {trained} steps the head was "
                "trained for: later steps rarely accept",
                expected=trained,
                actual=wanted,
            )


KIND = Eagle3()
