"""Property tests: a hybrid model's state layers are never counted as KV, whatever the layout."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.kv import KvLayout
from kvplan.spec.model import spec_from_config
from kvplan.units import GIB


@st.composite
def hybrid_configs(draw):
    """A Granite-4.0-H-style (Mamba2), Qwen3-Next-style (Gated-DeltaNet), LFM2-style (short conv) or
    MiniMax-style (lightning attention) config with a random layout."""
    n = draw(st.integers(2, 24))
    kinds = draw(st.lists(st.booleans(), min_size=n, max_size=n).filter(lambda k: any(k)))  # True: attention
    kv_heads, head_dim = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([64, 128, 256]))
    cfg = {"num_hidden_layers": n, "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": kv_heads,
           "head_dim": head_dim, "vocab_size": 1000, "intermediate_size": 1024, "torch_dtype": "bfloat16"}
    family = draw(st.sampled_from(["granitemoehybrid", "qwen3_next", "lfm2", "minimax"]))
    if family == "minimax":
        cfg.update(model_type="minimax", layer_types=["full_attention" if a else "linear_attention" for a in kinds])
    elif family == "lfm2":
        cfg.update(model_type="lfm2", layer_types=["full_attention" if a else "conv" for a in kinds],
                   conv_L_cache=draw(st.sampled_from([3, 4])))
    elif family == "granitemoehybrid":
        cfg.update(model_type="granitemoehybrid", layer_types=["attention" if a else "mamba" for a in kinds],
                   mamba_n_heads=draw(st.sampled_from([8, 16, 32])), mamba_d_head=64, mamba_n_groups=1,
                   mamba_d_state=draw(st.sampled_from([64, 128])), mamba_d_conv=4, mamba_expand=2)
    else:
        cfg.update(model_type="qwen3_next", layer_types=["full_attention" if a else "linear_attention" for a in kinds],
                   linear_num_key_heads=8, linear_num_value_heads=draw(st.sampled_from([8, 16])),
                   linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4)
    return cfg, kinds


@settings(max_examples=60, deadline=None)
@given(hybrid_configs(), st.integers(1, 200_000))
def test_state_layers_never_count_as_kv(case, tokens):
    cfg, kinds = case
    spec = spec_from_config(cfg, "prop")
    lay = KvLayout.of(spec)
    n_attn, n_state = sum(kinds), len(kinds) - sum(kinds)
    # per-token KV: the attention layers only, as if the state layers were not there
    assert lay.bytes_per_token() == n_attn * 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2
    attention_only = spec_from_config(
        {**cfg, "num_hidden_layers": n_attn, "layer_types": [t for t, a in zip(cfg["layer_types"], kinds) if a]}, "attn"
    )
    assert lay.bytes_per_token() == KvLayout.of(attention_only).bytes_per_token()
    # the state is fixed per request: n_state layers, one size, however long the request
    per_layer = spec.layers[kinds.index(False)].state.bytes_per_request("bfloat16") if n_state else 0
    assert lay.state_bytes_per_request() == n_state * per_layer
    assert lay.request_bytes(tokens, paged=False) == tokens * lay.bytes_per_token() + lay.state_bytes_per_request()
    # vLLM's pool: state groups hold the state layers, attention groups the attention layers
    plan = plan_capacity(spec, EngineArgs(kv_cache_memory_bytes=4 * GIB, max_model_len=4096))
    assert sum(g.layers for g in plan.groups if g.kind == "state") == n_state
    assert sum(g.layers for g in plan.groups if g.kind != "state") == n_attn
    assert plan.block_size_tokens * lay.bytes_per_token() // n_attn >= per_layer  # one page holds a state
