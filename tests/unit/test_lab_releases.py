"""The lab's own release facts (orchestrator/lab/vllm_releases.yaml) read as the stand-in
reads them when it starts: every release has every fact, from the step in force there."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.lab.releases import LOADER, default_release, known_releases, release
from orchestrator.lab.vllm_standin import METHODS as LAB_METHODS
from orchestrator.serving.capabilities import capabilities_for


def test_the_default_release_is_one_the_lab_knows() -> None:
    assert default_release() in known_releases()


@pytest.mark.parametrize("version", known_releases())
def test_each_release_has_its_methods_and_response_facts(version: str) -> None:
    facts = release(version)

    assert "draft_model" in facts.methods
    assert isinstance(facts.per_request_spec_decode_metrics, bool)
    assert isinstance(facts.system_fingerprint, bool)
    assert facts.fact("methods").source.startswith(("0.", "1."))


def test_a_release_holds_the_step_in_force_at_it() -> None:
    """0.21.0 added system_fingerprint to responses (the data's source line)."""
    assert (release("0.20.2").system_fingerprint, release("0.21.0").system_fingerprint) == (
        False,
        True,
    )


MIXED = {
    None: None,
    "full_attention": "full_attention",
    "refused": "refused",
    "v2_runner": "v2_selected",
    "v1_refused": "v2_default",
    "v2_only": "served",
}
"""The lab's words for a mixed drafter's fate, as orch's table words them."""
RUNNER = {None: None, "int": "integer", "exactly_1": "only_1"}


@pytest.mark.parametrize("version", known_releases())
def test_the_labs_facts_and_orchs_table_agree_wherever_both_hold_one(version: str) -> None:
    """The lab keeps its own data so that a wrong row of orch's table shows up as preflight
    and the lab disagreeing; this holds the two to each other, release by release."""
    lab, row = release(version), capabilities_for(version).row
    assert lab.methods == list(row.methods)
    assert lab.per_request_spec_decode_metrics is row.per_request_spec_decode_metrics
    assert RUNNER[lab.fact("runner_env").value] == row.runner_values
    mixed = lab.fact("mixed_dflash_drafter")
    assert MIXED[mixed.value] == row.mixed_attention_drafters
    assert mixed.error == row.error
    zero_head = lab.fact("zero_head_on_v2_for_conditional_generation").value
    assert zero_head is row.lm_head_zero_for_conditional_generation
    refused = lab.fact("v2_refused_methods").value
    assert refused == {m: e for m, e in row.v2_refused_methods.items() if m in LAB_METHODS}
    assert lab.fact("temperature_max").value == row.request_temperature_max


def test_the_labs_data_files_are_read_by_a_safe_loader() -> None:
    """The stand-in reads its release and step-cost data with LOADER: a tag that would
    run code is refused, never constructed."""
    with pytest.raises(yaml.constructor.ConstructorError, match="python/object/apply"):
        yaml.load("a: !!python/object/apply:os.system ['true']\n", Loader=LOADER)
