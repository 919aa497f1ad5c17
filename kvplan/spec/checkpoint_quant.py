"""A checkpoint's own quantization, as vLLM reads it from `quantization_config` (GPTQ, AWQ,
compressed-tensors, FP8, MXFP4, bitsandbytes; ModelOpt in `modelopt_quant`)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvplan.spec.config_section import section
from kvplan.spec.modelopt_quant import modelopt_quant
from kvplan.spec.quant import LINEAR_GROUPS, WeightQuant, make_quant
from kvplan.spec.quant_exclusions import modules_by_group, share_pct


def weight_quant_from_config(config: dict[str, Any], layers_per_group: dict[str, int] | None = None) -> WeightQuant:
    """A checkpoint's weight scheme and the modules it leaves unconverted; `layers_per_group`: how
    many decoder layers hold each ParamCount group (hybrids: fewer attention layers)."""
    q: Any = config.get("quantization_config") or section(config, "text_config").get("quantization_config")
    quant = _scheme(config, layers_per_group or {})
    if not isinstance(q, dict) or quant.method == "none" or quant.experts_only or quant.groups:
        return quant
    return _with_exclusions(quant, q, config, layers_per_group or {})


def _with_exclusions(quant: WeightQuant, q: dict[str, Any], config: dict[str, Any],
                     layers_per_group: dict[str, int]) -> WeightQuant:
    """The scheme's bits on each group, less the share of it the checkpoint leaves unconverted."""
    names = q.get("ignore") or q.get("modules_to_not_convert") or q.get("exclude_modules") or []
    excluded = modules_by_group([str(n) for n in names]) if isinstance(names, list) else {}
    if not excluded:
        return quant
    text = section(config, "text_config", config)
    all_layers = int(text.get("num_hidden_layers") or 1)
    groups = tuple((g, quant.linear_bits_x100,
                    100 - share_pct(excluded[g], layers_per_group.get(g) or all_layers) if g in excluded else 100)
                   for g in LINEAR_GROUPS)
    return replace(quant, groups=groups)


def _scheme(config: dict[str, Any], layers_per_group: dict[str, int]) -> WeightQuant:
    """Read `quantization_config` (also nested in `text_config`) of a checkpoint; a model
    directory's `hf_quant_config.json` arrives here as a modelopt `quantization_config`."""
    q: Any = config.get("quantization_config") or section(config, "text_config").get("quantization_config")
    if not isinstance(q, dict):
        return WeightQuant()
    method = str(q.get("quant_method", "")).lower()
    if method == "modelopt" or (q.get("quant_algo") and method in ("", "fp8")):
        return modelopt_quant(q, config, layers_per_group)
    if method == "compressed-tensors":
        groups: dict[str, Any] = q.get("config_groups") or {}
        first: dict[str, Any] = next(iter(groups.values()), {})
        weights: dict[str, Any] = first.get("weights") or {}
        bits = int(weights.get("num_bits", 8))
        if bits == 4:
            return make_quant("w4a16", group_size=int(weights.get("group_size") or 128))
        return make_quant("fp8" if weights.get("type") == "float" else "int8")
    if method in ("gptq", "awq"):
        bits_field: Any = q.get("bits", q.get("w_bit", 4))
        if int(bits_field) == 8:
            return make_quant("int8")
        return make_quant(method, group_size=int(q.get("group_size", q.get("q_group_size", 128)) or 128))
    if method in ("fp8", "fbgemm_fp8", "mxfp4", "bitsandbytes"):
        return make_quant(method)
    return WeightQuant()
