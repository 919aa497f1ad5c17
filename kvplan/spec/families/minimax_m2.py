"""MiniMax-M2 / M2.5 (`model_type: minimax_m2`): a generic GQA MoE decoder for memory, its q and k
norms over all heads at once (q_out + kv_out weights, not 2 x head_dim), and one thing the generic
step cannot see:

    use_qk_norm (default true), qk_norm_type not `per_head`
                   q and k are RMS-normalized over all heads at once, so under tensor parallelism
                   each rank's share of heads needs the others' statistics: vLLM minimax_m2.py
                   (`MiniMaxText01RMSNormTP.forward_qk`) all-reduces the fp32 variances, one
                   all-reduce per layer of a few bytes per token (latency, not bandwidth)
"""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family, Traits


def m2_norm_allreduces(cfg: dict[str, Any], n_layers: int) -> int:
    return n_layers if cfg.get("use_qk_norm", True) and cfg.get("qk_norm_type") != "per_head" else 0


FAMILY = Family(
    model_types=frozenset({"minimax_m2"}),
    vllm_source="vllm/model_executor/models/minimax_m2.py",
    checked="transformers",
    traits=Traits(qk_norm_full_width=True),
    tp_norm_allreduces=m2_norm_allreduces,
)
