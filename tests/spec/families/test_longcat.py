"""LongCat-Flash: two MLA attentions per decoder layer, each with its own cache (vLLM longcat_flash.py
self_attn.0 / self_attn.1)."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("longcat_flash")


def test_two_caches_per_layer() -> None:
    s = spec("longcat_flash", kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
             n_routed_experts=4, moe_topk=2)
    assert s.num_layers == 8 and {x.kind for x in s.layers} == {"mla"}
