"""Parameter counts of the hybrid and attention-free families, exact against the Hugging Face modules
(tiny random configs built on the meta device: shapes only, no weights), and configs written by
transformers 5 (Nemotron-H's `layers_block_type` instead of `hybrid_override_pattern`)."""
from __future__ import annotations

import pytest

from kvplan.plan.kv import KvLayout
from kvplan.spec.model import spec_from_config

_C = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=300)
_MAMBA2 = dict(mamba_n_heads=4, mamba_d_head=32, mamba_d_state=8, mamba_n_groups=1)
FAMILIES = {
    "granite-4.0-h moe": (
        "granitemoehybrid",
        dict(
            _C,
            **_MAMBA2,
            intermediate_size=32,
            shared_intermediate_size=48,
            num_local_experts=4,
            num_experts_per_tok=2,
            num_hidden_layers=4,
            layer_types=["mamba", "attention", "mamba", "mamba"],
        ),
    ),
    "granite-4.0-h dense": (
        "granitemoehybrid",
        dict(
            _C,
            **_MAMBA2,
            intermediate_size=96,
            shared_intermediate_size=96,
            num_local_experts=0,
            num_experts_per_tok=0,
            num_hidden_layers=4,
            layer_types=["mamba", "attention", "mamba", "mamba"],
        ),
    ),
    "falcon-h1": (
        "falcon_h1",
        dict(
            _C,
            intermediate_size=96,
            num_hidden_layers=3,
            head_dim=16,
            mamba_n_heads=4,
            mamba_d_head=16,
            mamba_d_ssm=64,
            mamba_d_state=8,
            mamba_n_groups=1,
        ),
    ),
    "falcon-h1 rms norm": (
        "falcon_h1",
        dict(
            _C,
            intermediate_size=96,
            num_hidden_layers=3,
            head_dim=16,
            mamba_n_heads=4,
            mamba_d_head=16,
            mamba_d_ssm=64,
            mamba_d_state=8,
            mamba_n_groups=1,
            mamba_rms_norm=True,
        ),
    ),
    "jamba": (
        "jamba",
        dict(
            _C,
            intermediate_size=96,
            num_hidden_layers=4,
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=1,
            num_experts=4,
            num_experts_per_tok=2,
            mamba_d_state=8,
            mamba_expand=2,
        ),
    ),
    "bamba": ("bamba", dict(_C, **_MAMBA2, intermediate_size=96, num_hidden_layers=4, attn_layer_indices=[1])),
    "nemotron-h": (
        "nemotron_h",
        dict(
            _C,
            intermediate_size=96,
            num_hidden_layers=4,
            hybrid_override_pattern="M*M-",
            mamba_num_heads=4,
            mamba_head_dim=16,
            ssm_state_size=8,
            n_groups=2,
            head_dim=16,
        ),
    ),
    "qwen3-next": (
        "qwen3_next",
        dict(
            _C,
            intermediate_size=96,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            num_hidden_layers=4,
            head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
        ),
    ),
    "qwen3.5": (
        "qwen3_5_text",
        dict(
            _C,
            intermediate_size=96,
            num_hidden_layers=4,
            head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
        ),
    ),
    "mamba2": (
        "mamba2",
        dict(
            hidden_size=64,
            num_hidden_layers=3,
            num_heads=8,
            head_dim=16,
            state_size=8,
            n_groups=2,
            vocab_size=300,
            expand=2,
        ),
    ),
    "lfm2": ("lfm2", dict(_C, intermediate_size=96, num_hidden_layers=4, full_attn_idxs=[1, 3])),
    "lfm2 biased conv": (
        "lfm2",
        dict(
            _C,
            intermediate_size=96,
            num_hidden_layers=4,
            full_attn_idxs=[1],
            conv_bias=True,
            block_ffn_dim_multiplier=1.5,
            block_multiple_of=32,
        ),
    ),
    "minimax": (
        "minimax",
        dict(_C, intermediate_size=96, num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2, head_dim=16),
    ),
    "zamba2": (
        "zamba2",
        dict(
            _C,
            num_key_value_heads=4,
            num_hidden_layers=6,
            intermediate_size=96,
            n_mamba_heads=4,
            mamba_d_state=8,
            layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid", "mamba"],
        ),
    ),
    "zamba2 adapters": (
        "zamba2",
        dict(
            _C,
            num_key_value_heads=4,
            num_hidden_layers=6,
            intermediate_size=96,
            n_mamba_heads=4,
            mamba_d_state=8,
            mamba_ngroups=2,
            use_shared_attention_adapter=True,
            num_mem_blocks=2,
            adapter_rank=16,
            add_bias_linear=True,
            layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid", "mamba"],
        ),
    ),
    "kimi-linear": (
        "kimi_linear",
        dict(
            _C,
            num_key_value_heads=4,
            num_hidden_layers=4,
            intermediate_size=96,
            moe_intermediate_size=32,
            num_experts=4,
            num_experts_per_token=2,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=16,
            v_head_dim=16,
            linear_num_heads=4,
            linear_head_dim=16,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            layer_types=["linear_attention"] * 3 + ["full_attention"],
        ),
    ),
    "falcon-mamba": (
        "falcon_mamba",
        dict(hidden_size=64, num_hidden_layers=3, intermediate_size=128, state_size=8, vocab_size=300),
    ),
}


def _hf(model_type: str, kwargs: dict):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(model_type, **kwargs)
    with torch.device("meta"):  # shapes only: nothing is allocated
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return cfg.to_dict(), sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_parameters_match_the_hf_modules(family):
    """Granite-4.0-H counts its shared MLP (shared_intermediate_size); Falcon-H1's Mamba2 mixer has its gated
    norm only with mamba_rms_norm (vLLM falcon_h1.py MambaMixer2 use_rms_norm=config.mamba_rms_norm)."""
    model_type, kwargs = FAMILIES[family]
    cfg, expected = _hf(model_type, kwargs)
    assert spec_from_config(cfg, family).params.total == expected


def test_nemotron_h_as_transformers_5_writes_it():
    """transformers 5 saves Nemotron-H with `layers_block_type` (linear_attention / full_attention / mlp / moe) and
    no num_hidden_layers: the same layers, KV and state as from hybrid_override_pattern."""
    model_type, kwargs = FAMILIES["nemotron-h"]
    cfg, _ = _hf(model_type, kwargs)
    cfg.pop("hybrid_override_pattern", None)
    cfg.pop("num_hidden_layers", None)
    assert cfg.get("layers_block_type")
    new = spec_from_config(cfg, "new")
    old = spec_from_config(dict(cfg, hybrid_override_pattern="M*M-", layers_block_type=None), "old")
    assert new.attention_kinds == old.attention_kinds == {"mamba2": 2, "full": 1, "mlp": 1}
    assert KvLayout.of(new).state_bytes_per_request() == KvLayout.of(old).state_bytes_per_request() > 0


def test_unknown_block_word_is_one_line():
    from kvplan.errors import ConfigError

    with pytest.raises(ConfigError, match="layers_block_type 'conv'"):
        spec_from_config({"model_type": "nemotron_h", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10,
                          "layers_block_type": ["mamba", "conv"]}, "x")
