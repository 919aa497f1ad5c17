"""ERNIE-4.5: the MoE model's router carries a per-expert bias."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("ernie4_5")
    assert_exact("ernie4_5_moe")


def test_router_bias() -> None:
    moe = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    assert spec("ernie4_5_moe", **moe).params.mlp_dense - spec("ernie4_5", **moe).params.mlp_dense == 4 * 4
