"""Qwen3 and Qwen3-MoE (`qwen3`, `qwen3_moe`; vLLM qwen3.py / qwen3_moe.py): per-head q/k norms, no
q/k/v biases; Qwen2's sliding-window rule and 32,768 default positions."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits
from kvplan.spec.families.qwen2 import qwen_windows

FAMILY = Family(
    frozenset({"qwen3", "qwen3_moe"}),
    "vllm/model_executor/models/qwen3.py",
    checked="transformers",
    defaults={"max_position_embeddings": 32768},
    windows=qwen_windows,
    traits=Traits(qk_norm=True),
)
