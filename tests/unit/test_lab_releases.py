"""The lab's own release facts (orchestrator/lab/vllm_releases.yaml) read as the stand-in
reads them when it starts: every release has every fact, from the step in force there."""

from __future__ import annotations

import pytest

from orchestrator.lab.releases import default_release, known_releases, release


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
