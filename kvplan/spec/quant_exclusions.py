"""Modules a quantized checkpoint leaves in the model dtype (ModelOpt `exclude_modules`,
compressed-tensors `ignore`, FP8 `modules_to_not_convert`), sorted into ParamCount groups
(attention, mixer, dense MLP, routed experts): a group's excluded share is the share of its decoder
layers the names cover (a name without a layer index, or a `re:` pattern, covers all of them).
Routers, norms, embeddings, the LM head and encoders are not converted by any scheme kvplan reads,
so names of those change nothing.
"""
from __future__ import annotations

import re

_LAYER = re.compile(r"layers\.(\d+)\.")
_ROUTER = re.compile(r"(\.gate$|\.gate\*?$|router|e_score_correction|shared_expert_gate)")


def module_group(name: str) -> str | None:
    """The ParamCount group a module name's weights are counted in (None: not a converted linear).
    A compressed-tensors `re:` pattern is read by the words in it."""
    n = name.lower().removeprefix("re:")
    if any(k in n for k in ("visual", "vision", "mm_projector", "multi_modal", "audio", "lm_head", "embed")):
        return None
    if _ROUTER.search(n.rstrip("*")) or n.endswith("norm") or "norm." in n:
        return None
    if n.endswith(("indexers_proj", "weights_proj")):  # an indexer's per-head weighting: hidden x heads, noise
        return None
    if "shared_expert" in n:
        return "mlp_dense"
    if "experts" in n:
        return "experts"
    if any(k in n for k in ("self_attn", ".attn", "attention", "indexer", "q_proj", "k_proj", "v_proj", "o_proj",
                            "qkv", "kv_a_", "kv_b_", "q_a_", "q_b_")):
        return "attention"
    if any(k in n for k in ("mixer", "linear_attn", "mamba", "conv")):
        return "mixer"
    if any(k in n for k in ("mlp", "ffn", "feed_forward")):
        return "mlp_dense"
    return None


def share_pct(names: list[str], n_layers: int) -> int:
    """Hundredths of a group the names cover: all of it when one has no layer index."""
    layers = set()
    for name in names:
        m = _LAYER.search(name)
        if m is None:
            return 100
        layers.add(int(m.group(1)))
    return min(100, round(100 * len(layers) / max(1, n_layers)))


def modules_by_group(names: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in names:
        group = module_group(name)
        if group is not None:
            out.setdefault(group, []).append(name)
    return out
