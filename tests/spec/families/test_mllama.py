"""Llama-3.2-Vision's tiled ViT with global layers and projector: equal to the Hugging Face modules
of a tiny config on the meta device."""
from __future__ import annotations

from family_oracle import tower_vs_transformers


def test_matches_transformers() -> None:
    kvplan, transformers = tower_vs_transformers("mllama")
    assert kvplan == transformers
