"""Llama-4 (`llama4`, `llama4_text`; vLLM llama4.py): RoPE layers attend within `attention_chunk_size`
chunks, NoPE layers (`no_rope_layers[i] == 0`, by default every 4th) attend to everything; MoE every
`interleave_moe_layer_step`-th layer with one shared expert, dense layers `intermediate_size_mlp` wide."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family, Traits


def llama4_words(cfg: dict[str, Any], n_layers: int, where: str) -> list[str] | None:
    if not cfg.get("attention_chunk_size") or cfg.get("layer_types"):
        return None
    no_rope = cfg.get("no_rope_layers")
    if not isinstance(no_rope, list) or len(no_rope) != n_layers:
        interval = int(cfg.get("no_rope_layer_interval") or 4)
        no_rope = [int((i + 1) % interval != 0) for i in range(n_layers)]
    return ["chunked" if uses_rope else "full" for uses_rope in no_rope]


def llama4_plan(cfg: dict[str, Any], n_layers: int) -> list[str]:
    step = int(cfg.get("interleave_moe_layer_step") or 1)
    return ["moe" if (i + 1) % step == 0 else "dense" for i in range(n_layers)]


FAMILY = Family(
    frozenset({"llama4", "llama4_text"}),
    "vllm/model_executor/models/llama4.py",
    checked="transformers",
    unchecked=frozenset({"llama4"}),  # the multimodal wrapper; its text model is checked
    defaults={"n_shared_experts": 1},
    layer_words=llama4_words,
    mlp_plan=llama4_plan,
    traits=Traits(dense_intermediate_key="intermediate_size_mlp"),
)
