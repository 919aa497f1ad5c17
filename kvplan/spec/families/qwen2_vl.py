"""Qwen2-VL and Qwen2.5-VL decoders (`qwen2_vl`, `qwen2_5_vl`; vLLM qwen2_vl.py / qwen2_5_vl.py): Qwen2's
biased q/k/v and sliding-window rule; their vision towers are in qwen_vision.py."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits
from kvplan.spec.families.qwen2 import qwen_windows

FAMILY = Family(
    frozenset({"qwen2_vl", "qwen2_5_vl"}),
    "vllm/model_executor/models/qwen2_5_vl.py",
    checked="hand",
    windows=qwen_windows,
    traits=Traits(qkv_bias=True),
)
