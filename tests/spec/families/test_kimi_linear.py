"""Kimi-Linear: linear_attn_config.kda_layers lists the KDA layers 1-based (vLLM kimi_linear.py), MLA
elsewhere; a KDA state is q, k and v conv states of H x d channels in the model dtype and an (H, d, d)
float32 recurrent state."""
from __future__ import annotations

from family_oracle import spec

MLA = {"kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16}


def test_kda_layers_are_one_based() -> None:
    s = spec("kimi_linear", linear_attn_config={"kda_layers": [1, 3], "num_heads": 4, "head_dim": 16,
                                                "short_conv_kernel_size": 4}, **MLA)
    assert [x.label for x in s.layers] == ["kda", "mla", "kda", "mla"]
    st = s.layers[0].state
    assert st.bytes_per_request("bfloat16") == 3 * (3 * 4 * 16) * 2 + 4 * 16 * 16 * 4
