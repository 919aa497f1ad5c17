"""gpt-oss: a learned sink per head, biased experts and router (transformers GptOssExperts / GptOssTopKRouter)."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("gpt_oss")


def test_sinks_and_expert_biases_by_hand() -> None:
    s = spec("gpt_oss", num_local_experts=4, num_experts_per_tok=2, intermediate_size=32)
    assert s.params.attention == 4 * (64 * 128 + 64 * 64 + 4)  # + one sink per head
    expert = 3 * 64 * 32 + 2 * 32 + 64  # gate_up and down with their biases
    assert s.params.experts == 4 * 4 * expert
    assert s.params.mlp_dense == 4 * (64 * 4 + 4)  # the router with its bias
