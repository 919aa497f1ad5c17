"""Apertus (`apertus`, `apertus1p5`, `apertus1p5_text`; vLLM apertus.py): an up/down MLP with xIELU, whose
learned alpha_p and alpha_n are two parameters per MLP; Apertus 1.0 has per-head q/k norms."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILIES = (
    Family(
        frozenset({"apertus"}),
        "vllm/model_executor/models/apertus.py",
        checked="transformers",
        traits=Traits(gated_mlp=False, qk_norm=True, extra_per_layer_mlp=2),
    ),
    Family(
        frozenset({"apertus1p5", "apertus1p5_text"}),
        "vllm/model_executor/models/apertus.py",
        checked="transformers",
        unchecked=frozenset({"apertus1p5"}),
        traits=Traits(gated_mlp=False),
    ),
)
