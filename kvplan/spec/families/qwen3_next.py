"""Qwen3-Next and Qwen3.5 (`qwen3_next`, `qwen3_5*`; vLLM qwen3_next.py / qwen3_5.py): Gated-DeltaNet
linear attention between full-attention layers (`layer_types`, else every `full_attention_interval`-th
layer full: the generic rule), the full layers' q_proj also emitting an output gate (unless
`attn_output_gate` is false), per-head q/k norms; the SSM state in `mamba_ssm_dtype`."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(
    frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}),
    "vllm/model_executor/models/qwen3_next.py",
    checked="transformers",
    unchecked=frozenset({"qwen3_5", "qwen3_5_moe"}),  # the multimodal wrappers; their text models are checked
    traits=Traits(gated_attention=True, qk_norm=True),
)
