"""OLMo 2 (`olmo2`, vLLM olmo2.py): a Llama decoder with q/k norms (counted as per-head here, checked
within 1% against transformers)."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(frozenset({"olmo2"}), "vllm/model_executor/models/olmo2.py", checked="transformers",
                traits=Traits(qk_norm=True))
