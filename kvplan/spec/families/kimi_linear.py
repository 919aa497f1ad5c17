"""Kimi-Linear (`kimi_linear`, vLLM kimi_linear.py): KDA (linear attention) layers between MLA ones.
The checkpoint lists the KDA layers in `linear_attn_config.kda_layers` (1-based); transformers 5 writes
`layer_types`. A KDA layer keeps q, k and v conv states of H x d channels in the model dtype and a
(H/tp, d, d) recurrent state in float32 (`kda_state_shape`, `kda_state_dtype`); its keys come from
`linear_attn_config` (num_heads, head_dim, short_conv_kernel_size) or transformers' names."""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache.state import RecurrentState
from kvplan.spec.config_section import section
from kvplan.spec.families.family import Family
from kvplan.spec.state import config_int


def kda_layers(cfg: dict[str, Any], n_layers: int, where: str) -> set[int]:
    """The KDA (linear) layers, 0-based."""
    lin = cfg.get("linear_attn_config")
    if isinstance(lin, dict) and lin.get("kda_layers") is not None:
        kda = lin["kda_layers"]
        if not isinstance(kda, list) or not all(isinstance(i, int) and 1 <= i <= n_layers for i in kda):
            raise ConfigError(f"{where}: linear_attn_config.kda_layers must list layer numbers 1..{n_layers}")
        return {i - 1 for i in kda}
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != n_layers or set(types) - {"full_attention", "linear_attention"}:
            raise ConfigError(
                f"{where}: layer_types must hold {n_layers} entries of full_attention or linear_attention"
            )
        return {i for i, t in enumerate(types) if t == "linear_attention"}
    return set()


def kimi_words(cfg: dict[str, Any], n_layers: int, where: str) -> list[str]:
    kda = kda_layers(cfg, n_layers, where)
    return ["kda" if i in kda else "mla" for i in range(n_layers)]


def kda_state(word: str, cfg: dict[str, Any], head_dim: int, where: str) -> RecurrentState | None:
    if word != "kda":
        return None
    lin = section(cfg, "linear_attn_config")
    merged = {"linear_num_heads": lin.get("num_heads"), "linear_head_dim": lin.get("head_dim"),
              "linear_conv_kernel_dim": lin.get("short_conv_kernel_size")}
    merged = {k: v if v is not None else cfg.get(k) for k, v in merged.items()}
    heads = config_int(merged, where, "linear_num_heads")
    dim = config_int(merged, where, "linear_head_dim")
    kernel = config_int(merged, where, "linear_conv_kernel_dim", default=4)
    return RecurrentState("kda", 3 * heads * dim, kernel, heads, dim, dim, ssm_dtype="float32")


FAMILY = Family(frozenset({"kimi_linear"}), "vllm/model_executor/models/kimi_linear.py", checked="hand",
                layer_words=kimi_words, state=kda_state)
