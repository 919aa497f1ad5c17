"""LFM2: attention at full_attn_idxs, gated short convolutions elsewhere; LFM2-MoE's first
num_dense_layers layers dense."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("lfm2")


def test_full_attn_idxs() -> None:
    s = spec("lfm2", full_attn_idxs=[1, 3], conv_L_cache=3)
    assert [x.label for x in s.layers] == ["short_conv", "full", "short_conv", "full"]
    assert s.layers[0].state.bytes_per_request("bfloat16") == 2 * 64 * 2  # (L_cache - 1) x hidden, bf16


def test_moe_after_the_dense_layers() -> None:
    s = spec("lfm2_moe", num_dense_layers=1, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    assert s.params.experts == 3 * 4 * 3 * 64 * 32
