"""Phi-3 (`phi3`, vLLM phi3.py): a Llama-shaped decoder with fused projections (the same weights);
transformers' Phi3Config defaults to 4,096 positions."""
from __future__ import annotations

from kvplan.spec.families.family import Family

FAMILY = Family(frozenset({"phi3"}), "vllm/model_executor/models/phi3.py", checked="hand",
                defaults={"max_position_embeddings": 4096})
