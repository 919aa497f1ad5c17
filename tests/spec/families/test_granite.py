"""Granite: 32,000 tokens by default; Granite-4.0's shared MLP beside the experts (no gate)."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    for t in ("granite", "granitemoe", "granitemoehybrid", "granitemoeshared"):
        assert_exact(t)


def test_shared_mlp_beside_the_experts() -> None:
    moe = {"num_local_experts": 4, "num_experts_per_tok": 2}
    with_shared = spec("granitemoeshared", shared_intermediate_size=48, **moe).params
    without = spec("granitemoeshared", **moe).params
    assert with_shared.mlp_dense - without.mlp_dense == 4 * 3 * 64 * 48
