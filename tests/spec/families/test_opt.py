"""OPT: learned positions offset by 2 rows (transformers' OPTLearnedPositionalEmbedding), biased
everything, a tied LM head."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("opt")


def test_two_extra_position_rows() -> None:
    p = spec("opt", max_position_embeddings=2048).params
    assert p.embedding == 320 * 64 + (2048 + 2) * 64 and p.lm_head == 0
