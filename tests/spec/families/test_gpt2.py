"""GPT-2: learned positions, biased LayerNorms and projections, an up/down MLP, a tied LM head;
against transformers and by hand (wte 320 x 64, wpe 1,024 x 64)."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("gpt2")


def test_positions_and_tied_head_by_hand() -> None:
    p = spec("gpt2", n_positions=1024, max_position_embeddings=None, num_key_value_heads=None).params  # MHA
    assert p.embedding == 320 * 64 + 1024 * 64
    assert p.lm_head == 0
    # per layer: c_attn 64 x 192 + 192, c_proj 64 x 64 + 64, mlp 64 x 96 + 96 and 96 x 64 + 64, two LN 2 x 128
    per_layer = (64 * 192 + 192) + (64 * 64 + 64) + (64 * 96 + 96 + 96 * 64 + 64) + 2 * 128
    assert p.attention + p.mlp_dense + p.norms == 4 * per_layer + 128
