"""The stand-in's step costs (orchestrator/lab/step_cost.py) and their data."""

from __future__ import annotations

import pytest

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
