"""SigLIP (Gemma-3's tower and projector): equal to the Hugging Face modules of a tiny config on the meta device."""
from __future__ import annotations

from family_oracle import tower_vs_transformers


def test_matches_transformers() -> None:
    kvplan, transformers = tower_vs_transformers("gemma3")
    assert kvplan == transformers
