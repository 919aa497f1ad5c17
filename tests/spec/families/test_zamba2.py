"""Zamba2: heads of 2 x hidden / heads over [hidden, embedding] (transformers Zamba2Config), multi-head;
Mamba2 on every layer and the shared attention on the hybrid ones; shared blocks counted once."""
from __future__ import annotations

from family_oracle import spec


def test_geometry_and_layers() -> None:
    s = spec("zamba2", layers_block_type=["mamba", "hybrid", "mamba", "hybrid"], n_mamba_heads=8,
             num_key_value_heads=None)
    assert (s.head_dim, s.num_kv_heads) == (2 * 64 // 4, 4)
    assert [x.label for x in s.layers] == ["mamba2", "full+mamba2", "mamba2", "full+mamba2"]
    # one shared block (num_mem_blocks 1): attention 2h -> 3 H d (q, k, v) and H d -> h, no adapters by default
    assert s.params.attention == 2 * 64 * 3 * 4 * 32 + 4 * 32 * 64
    # its gated MLP (h x 2I, I x h), and per hybrid layer a h x h linear and a rank-128 gate_up adapter
    assert s.params.mlp_dense == (64 * 192 + 96 * 64) + 2 * (64 * 64 + 64 * 128 + 128 * 2 * 96)
