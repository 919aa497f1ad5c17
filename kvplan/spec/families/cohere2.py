"""Command-R7B / Command-A (`cohere2`, vLLM commandr.py): three sliding layers, then one full
(`sliding_window_pattern`, default 4)."""
from __future__ import annotations

from kvplan.spec.families.family import Family
from kvplan.spec.families.gemma3 import pattern_windows

FAMILY = Family(frozenset({"cohere2"}), "vllm/model_executor/models/commandr.py", checked="transformers",
                windows=pattern_windows(4))
