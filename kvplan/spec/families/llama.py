"""Llama, Mistral and Mixtral (`llama`, `mistral`, `mixtral`; vLLM llama.py / mixtral.py): the generic
decoder; the class defaults transformers' config classes fill in (Llama: 2,048 positions and a 32,000
vocabulary; Mistral and Mixtral: 32,768 positions)."""
from __future__ import annotations

from kvplan.spec.families.family import Family

FAMILIES = (
    Family(frozenset({"llama"}), "vllm/model_executor/models/llama.py", checked="transformers",
           defaults={"max_position_embeddings": 2048, "vocab_size": 32000}),
    Family(frozenset({"mistral", "mixtral"}), "vllm/model_executor/models/mixtral.py", checked="transformers",
           defaults={"vocab_size": 32000, "max_position_embeddings": 32768}),
)
