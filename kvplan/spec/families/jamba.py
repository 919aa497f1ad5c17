"""Jamba (`jamba`, vLLM jamba.py): attention where `i % attn_layer_period == attn_layer_offset`, Mamba v1
elsewhere (I = mamba_expand x hidden, mamba_d_state, mamba_d_conv, with dt/B/C layer norms); MoE where
`i % expert_layer_period == expert_layer_offset`, dense elsewhere."""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache.state import RecurrentState
from kvplan.spec.families.family import Family, Traits
from kvplan.spec.state import config_int, ssm_dtype


def jamba_words(cfg: dict[str, Any], n_layers: int, where: str) -> list[str]:
    period, offset = cfg.get("attn_layer_period"), cfg.get("attn_layer_offset", 0)
    if not isinstance(period, int) or period <= 0 or not isinstance(offset, int) or not 0 <= offset < period:
        raise ConfigError(f"{where}: attn_layer_period={period!r} / attn_layer_offset={offset!r} must be "
                          "integers with 0 <= offset < period")
    return ["full" if i % period == offset else "mamba1" for i in range(n_layers)]


def jamba_state(word: str, cfg: dict[str, Any], head_dim: int, where: str) -> RecurrentState | None:
    if word != "mamba1":
        return None
    hidden = config_int(cfg, where, "hidden_size")
    inner = int(float(cfg.get("mamba_expand") or 2) * hidden)
    n, k = config_int(cfg, where, "mamba_d_state", default=16), config_int(cfg, where, "mamba_d_conv", default=4)
    return RecurrentState("mamba1", inner, k, inner, 1, n, ssm_dtype=ssm_dtype(cfg, where))


def jamba_plan(cfg: dict[str, Any], n_layers: int) -> list[str]:
    period, offset = int(cfg.get("expert_layer_period") or 1), int(cfg.get("expert_layer_offset") or 0)
    return ["moe" if i % period == offset else "dense" for i in range(n_layers)]


FAMILY = Family(
    frozenset({"jamba"}),
    "vllm/model_executor/models/jamba.py",
    checked="transformers",
    layer_words=jamba_words,
    state=jamba_state,
    mlp_plan=jamba_plan,
    traits=Traits(mamba1_dt_norms=True),
)
