"""One module per model family whose layout the generic decoder rules cannot express: its layer
kinds, KV heads per layer and parameter count, with the vLLM model file it follows cited. Each
module exports a `FAMILY`; the generic code asks `family_of(config)` and never compares model
types itself (tests/architecture/test_family_branches.py keeps the old comparisons from growing).

Modules: family.py (the `Family` record), nemotron_nas.py (Llama-3.x-Nemotron Super/Ultra:
per-block `block_configs`), mimo_v2.py (MiMo-V2-Flash: sliding and full layers of their own
geometry, MoE per layer), deepseek_v4.py (DeepSeek-V4: an fp8 window and compressed caches per
layer, the indexer's K, grouped low-rank output, hyper-connections, MXFP4 experts), minimax_m3.py (MiniMax-M3:
block-sparse attention whose index
keys sit beside K and V, dense and MoE layers by `moe_layer_freq`), minimax_m2.py (MiniMax-M2: q/k
norms spanning the TP group, one more all-reduce per layer).
"""
from __future__ import annotations

from typing import Any

from kvplan.spec.families import deepseek_v4, mimo_v2, minimax_m2, minimax_m3, nemotron_nas
from kvplan.spec.families.family import Family

FAMILIES: tuple[Family, ...] = (
    nemotron_nas.FAMILY,
    mimo_v2.FAMILY,
    deepseek_v4.FAMILY,
    minimax_m2.FAMILY,
    minimax_m3.FAMILY,
)
_BY_TYPE = {t: f for f in FAMILIES for t in f.model_types}
_BY_ARCH = {a: f for f in FAMILIES for a in f.architectures}


def family_of(cfg: dict[str, Any]) -> Family | None:
    """The family module that owns this (text) config's `model_type` or first architecture, if one does
    (a re-packaged checkpoint may rename its model_type: sgl-project's DeepSeek-V4 says `deepseek_ref`)."""
    family = _BY_TYPE.get(str(cfg.get("model_type", "")))
    archs = cfg.get("architectures")
    if family is None and isinstance(archs, list) and archs:
        family = _BY_ARCH.get(str(archs[0]))
    return family
