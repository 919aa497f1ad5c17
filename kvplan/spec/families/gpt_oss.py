"""gpt-oss (`gpt_oss`, vLLM gpt_oss.py): one learned attention sink per head, biased experts (gate_up and
down) and a biased router; sliding and full layers alternate by `layer_types`."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(frozenset({"gpt_oss"}), "vllm/model_executor/models/gpt_oss.py", checked="transformers",
                traits=Traits(attention_sinks=True, expert_bias=True, router_bias=True))
