"""Llama-4: chunked-local attention on RoPE layers, full on every 4th (NoPE) layer; MoE every
interleave_moe_layer_step-th layer with one shared expert; dense MLPs intermediate_size_mlp wide."""
from __future__ import annotations

from family_oracle import assert_within, spec


def test_matches_transformers() -> None:
    assert_within("llama4_text", 1e-4)


def test_chunks_and_nope_layers() -> None:
    s = spec("llama4_text", attention_chunk_size=256, num_local_experts=4, num_experts_per_tok=1,
             interleave_moe_layer_step=2, intermediate_size_mlp=128)
    assert [x.kind for x in s.layers] == ["chunked", "chunked", "chunked", "full"]
    assert s.moe_shape == (4, 1, 96, 1)  # one shared expert by default
    assert s.params.experts == 2 * 4 * 3 * 64 * 96
