"""`gptj`'s switches (biases, norms, MLP shape) give a parameter count within the error
transformers_crosscheck.json records (kvplan counts 0.6% or less off transformers' own module)."""
from __future__ import annotations

from family_oracle import assert_within


def test_matches_transformers() -> None:
    assert_within("gptj", 0.006)
