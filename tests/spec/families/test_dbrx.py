"""DBRX: attn_config.kv_n_heads and ffn_config's expert keys lifted to the usual names (vLLM dbrx.py)."""
from __future__ import annotations

from family_oracle import spec


def test_nested_keys_are_read() -> None:
    s = spec("dbrx", num_key_value_heads=None, attn_config={"kv_n_heads": 2},
             ffn_config={"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2})
    assert s.num_kv_heads == 2 and s.moe_shape == (4, 2, 32, 0)
