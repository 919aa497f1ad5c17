"""MoE families the issue names, exact against the transformers modules (meta device, shapes only):
DBRX (keys nested in attn_config / ffn_config, as its config.json writes them and vLLM dbrx.py reads
them), GLM-4.5/4.6 (`use_qk_norm`, first_k_dense_replace, a shared expert), MiniMax-M2 (q/k norms over
all heads at once), DeepSeek-V3.2 (the sparse-attention indexer's wq_b, wk, k_norm and weights_proj) and
ERNIE-4.5 MoE (moe_num_experts / moe_k, experts from moe_layer_start_index to moe_layer_end_index every
moe_layer_interval-th layer, a score-correction bias per expert) and LongCat-Flash (two MLA attentions and
two dense MLPs per layer around experts whose router also picks weightless zero experts)."""
from __future__ import annotations

import pytest

from kvplan.plan.kv import KvLayout
from kvplan.spec.model import spec_from_config

_C = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=300)
FAMILIES = {
    "dbrx": dict(
        d_model=64,
        n_heads=4,
        n_layers=3,
        vocab_size=300,
        max_seq_len=128,
        attn_config=dict(kv_n_heads=2, clip_qkv=8, rope_theta=500000),
        ffn_config=dict(ffn_hidden_size=96, moe_num_experts=4, moe_top_k=2),
    ),
    "glm4_moe": dict(
        _C,
        head_dim=16,
        num_hidden_layers=3,
        intermediate_size=96,
        moe_intermediate_size=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        first_k_dense_replace=1,
        partial_rotary_factor=0.5,
        use_qk_norm=True,
    ),
    "minimax_m2": dict(
        _C, head_dim=16, num_hidden_layers=2, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2
    ),
    "deepseek_v32": dict(
        _C,
        num_hidden_layers=3,
        intermediate_size=96,
        moe_intermediate_size=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        first_k_dense_replace=1,
        kv_lora_rank=16,
        q_lora_rank=24,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=16,
        n_group=1,
        topk_group=1,
        index_head_dim=128,
        index_n_heads=4,
    ),
    "ernie4_5_moe": dict(
        _C,
        num_hidden_layers=6,
        intermediate_size=96,
        moe_intermediate_size=32,
        moe_num_experts=4,
        moe_k=2,
        moe_num_shared_experts=2,
        moe_layer_start_index=1,
        moe_layer_end_index=4,
        moe_layer_interval=2,
    ),
    "longcat_flash": dict(
        hidden_size=64,
        num_attention_heads=4,
        vocab_size=300,
        num_layers=2,
        ffn_hidden_size=96,
        expert_ffn_hidden_size=32,
        n_routed_experts=4,
        zero_expert_num=2,
        moe_topk=2,
        kv_lora_rank=16,
        q_lora_rank=24,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=16,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    ),
}


def _hf(model_type: str) -> tuple[dict, int]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(model_type, **FAMILIES[model_type])
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return cfg.to_dict(), sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_parameters_match_the_hf_modules(model_type):
    cfg, expected = _hf(model_type)
    assert spec_from_config(cfg, model_type).params.total == expected


def test_dbrx_reads_its_nested_kv_heads():
    """DBRX's published config.json has no top-level num_key_value_heads (transformers 5 adds one):
    attn_config.kv_n_heads = 2 of 4 heads must give GQA KV, 3 layers x 2 (K, V) x 2 heads x 16 x 2 B,
    not multi-head KV; the experts come from ffn_config (4 of 96 wide, top 2)."""
    cfg, _ = _hf("dbrx")
    cfg.pop("num_key_value_heads", None)
    spec = spec_from_config(cfg, "dbrx")
    assert KvLayout.of(spec).bytes_per_token() == 3 * 2 * 2 * 16 * 2 == 384
    assert spec.params.experts == 3 * 4 * 3 * 64 * 96 and spec.params.experts_active == 3 * 2 * 3 * 64 * 96


def test_longcat_flash_caches_two_latents_per_decoder_layer():
    """LongCat-Flash: vLLM longcat_flash.py builds two MLA attentions per decoder layer (self_attn.0 and
    self_attn.1), each an Attention with its own cache: 2 decoder layers -> 4 MLA cache layers of
    (16 + 8) latent values, 2 B each; zero experts route but hold no weights."""
    cfg, _ = _hf("longcat_flash")
    spec = spec_from_config(cfg, "longcat")
    assert spec.attention_kinds == {"mla": 4}
    assert KvLayout.of(spec).bytes_per_token() == 4 * (16 + 8) * 2 == 192
