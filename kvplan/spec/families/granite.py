"""Granite (`granite`, `granitemoe*`; vLLM granite.py / granitemoe*.py): Granite's class default vocabulary
is 32,000; Granite-4.0 (`granitemoehybrid`) and GraniteMoE-shared keep a shared MLP beside the
experts (`shared_intermediate_size`: input_linear h x 2s, output_linear s x h)."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILIES = (
    Family(frozenset({"granite"}), "vllm/model_executor/models/granite.py", checked="transformers",
           defaults={"vocab_size": 32000}),
    Family(frozenset({"granitemoe", "granite_swa", "granitemoe_swa"}), "vllm/model_executor/models/granitemoe.py",
           checked="transformers"),
    Family(frozenset({"granitemoehybrid", "granitemoeshared"}), "vllm/model_executor/models/granitemoehybrid.py",
           checked="transformers", traits=Traits(shared_mlp_key="shared_intermediate_size")),
)
