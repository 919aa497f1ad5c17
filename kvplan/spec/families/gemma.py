"""Gemma (`gemma`, vLLM gemma.py): a Llama-shaped decoder whose LM head is tied to the embedding and
whose class defaults to 8,192 positions (transformers' GemmaConfig)."""
from __future__ import annotations

from kvplan.spec.families.family import Family

FAMILY = Family(
    frozenset({"gemma"}),
    "vllm/model_executor/models/gemma.py",
    checked="transformers",
    defaults={"tie_word_embeddings": True, "max_position_embeddings": 8192},
)
