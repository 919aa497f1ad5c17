"""Every model type plain_decoders.py lists as checked against transformers is within 1% of transformers'
own module with exact K/V widths (the generic rules describe it), and none carries the unchecked warning."""
from __future__ import annotations

import pytest
from family_oracle import against_transformers, spec

from kvplan.spec.families import plain_decoders

CROSS = sorted(next(f for f in plain_decoders.FAMILIES if f.checked == "transformers").model_types)


@pytest.mark.parametrize("model_type", CROSS)
def test_matches_transformers(model_type: str) -> None:
    r = against_transformers(model_type)
    assert abs(r["params"]) <= 0.01 and r["kv_layers_off"] == 0, r


def test_not_warned() -> None:
    assert not any("not one kvplan has checked" in w for w in spec("olmoe").warnings)
