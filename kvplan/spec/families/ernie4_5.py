"""ERNIE-4.5 (`ernie4_5`, `ernie4_5_moe`; vLLM ernie45.py / ernie45_moe.py): the MoE model's experts from
`moe_layer_start_index` to `moe_layer_end_index`, every `moe_layer_interval`-th layer (the generic
rule), with a per-expert router bias."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILIES = (
    Family(frozenset({"ernie4_5"}), "vllm/model_executor/models/ernie45.py", checked="transformers"),
    Family(frozenset({"ernie4_5_moe"}), "vllm/model_executor/models/ernie45_moe.py", checked="transformers",
           traits=Traits(router_bias=True)),
)
