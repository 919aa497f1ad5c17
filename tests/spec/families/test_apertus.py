"""Apertus: an up/down xIELU MLP with two learned scalars per MLP (and per-head q/k norms in 1.0),
against transformers' own modules; 1.5's outer wrapper type is not checked."""
from __future__ import annotations

from family_oracle import SMALL, assert_exact, assert_within, spec


def test_matches_transformers() -> None:
    assert_exact("apertus")
    assert_within("apertus1p5_text", 0.001)


def test_xielu_scalars_and_qk_norms_by_hand() -> None:
    p = spec("apertus").params
    h, i, n = SMALL["hidden_size"], SMALL["intermediate_size"], SMALL["num_hidden_layers"]
    assert p.mlp_dense == n * (2 * h * i + 2)  # up, down, alpha_p, alpha_n
    assert p.attention == n * (h * (64 + 2 * 32) + 64 * h + 2 * 16)  # q/k norms of head_dim 16
