"""The stand-in's step costs (orchestrator/lab/step_cost.py) and their data."""

from __future__ import annotations

import pytest

from orchestrator.errors import InputError
from orchestrator.lab import step_cost


def test_step_costs_grow_with_the_batch_and_keep_one_stream_at_its_speed() -> None:
    """Without speculation one stream's step is one unit (--tokens-per-second keeps its
    meaning); a batch costs more a step and less a token; drafting costs on top."""
    for name, costs in step_cost.profiles().items():
        assert costs.units(1, 0) == pytest.approx(1.0), name
        assert costs.units(8, 0) >= costs.units(1, 0), name
        assert costs.units(8, 0) / 8 <= costs.units(1, 0), name
        assert costs.units(1, 3) >= costs.units(1, 0), name
    field = step_cost.profile("field-dflash")
    assert field.speedup(1, 15, 6.36) == pytest.approx(2.69, abs=0.02)
    assert field.speedup(16, 15, 6.36) < 1 < field.speedup(8, 15, 6.36)


HEAD = "default: a\nprofiles:\n  a:\n"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (HEAD + "    token_share: {value: 0.1}\n", "token_share.source"),
        (
            HEAD + "    token_share: {value: -1, source: x}\n",
            "token_share.value",
        ),
        ("default: a\nprofiles: [\n", "line 3: not YAML"),
    ],
    ids=["no-source", "negative", "not-yaml"],
)
def test_a_bad_profile_file_names_the_file_and_field(
    monkeypatch: pytest.MonkeyPatch, tmp_path, text: str, said: str
) -> None:
    data = tmp_path / "speed_costs.yaml"
    data.write_text(text)
    monkeypatch.setattr(step_cost, "DATA", data)
    step_cost._data.cache_clear()
    step_cost.profiles.cache_clear()
    try:
        with pytest.raises(InputError, match=said) as raised:
            step_cost.profiles()
        assert str(data) in str(raised.value)
    finally:
        step_cost._data.cache_clear()
        step_cost.profiles.cache_clear()
