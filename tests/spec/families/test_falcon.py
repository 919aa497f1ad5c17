"""Falcon: Falcon-7B caches one K/V head whatever n_head_kv says (transformers FalconAttention:
num_kv_heads = ... if (new_decoder_architecture or not multi_query) else 1) and has one norm per layer;
the new decoder (40B/180B) caches num_kv_heads and has two. Falcon-7B's effective KV heads are 1 in
../shared/reference/models.csv."""
from __future__ import annotations

from family_oracle import spec


def test_falcon_7b_is_multi_query() -> None:
    s = spec("falcon", num_key_value_heads=None, n_head_kv=2, num_attention_heads=4)
    assert {layer.num_kv_heads for layer in s.layers} == {1}
    assert s.params.norms == 4 * 1 * 2 * 64 + 2 * 64
    assert s.params.lm_head == 0  # tied unless the config says otherwise


def test_new_decoder_reads_its_kv_heads() -> None:
    s = spec("falcon", new_decoder_architecture=True, num_kv_heads=2, num_key_value_heads=None)
    assert {layer.num_kv_heads for layer in s.layers} == {2}
    assert s.params.norms == 4 * 2 * 2 * 64 + 2 * 64


def test_class_defaults() -> None:
    assert spec("falcon", max_position_embeddings=None).max_position_embeddings == 2048
