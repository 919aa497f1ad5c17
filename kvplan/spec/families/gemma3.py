"""Gemma 3 (`gemma3`, `gemma3_text`; vLLM gemma3.py / gemma3_mm.py; transformers
`(layer_idx + 1) % sliding_window_pattern`): five sliding layers, then one full (`sliding_window_pattern`,
default 6); four norms per layer and per-head q/k norms; the sliding layers' RoPE (rope_local_base_freq,
default 10,000, unscaled) is a second rotary cache in vLLM; class defaults from Gemma3TextConfig. The
multimodal checkpoints carry a SigLIP tower (siglip.py)."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family, Traits


def pattern_windows(default_pattern: int):  # noqa: ANN201 - returns a Family.windows rule
    def windows(cfg: dict[str, Any], n_layers: int, window: int) -> list[int | None]:
        pattern = int(cfg.get("sliding_window_pattern") or default_pattern)
        return [None if (i + 1) % pattern == 0 else window for i in range(n_layers)]

    return windows


FAMILY = Family(
    frozenset({"gemma3", "gemma3_text"}),
    "vllm/model_executor/models/gemma3.py",
    checked="transformers",
    unchecked=frozenset({"gemma3"}),  # the multimodal wrapper; its text model is checked
    defaults={"vocab_size": 262208, "max_position_embeddings": 131072, "sliding_window_pattern": 6,
              "tie_word_embeddings": True, "head_dim": 256, "sliding_window": 4096},
    windows=pattern_windows(6),
    traits=Traits(norms_per_layer=4, qk_norm=True),
    local_rope=True,
)
