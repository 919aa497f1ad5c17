"""NVIDIA ModelOpt checkpoints (FP8, NVFP4, MIXED_PRECISION), as vLLM reads them: the scheme from
`quantization_config` (`quant_method: modelopt`) or the model directory's `hf_quant_config.json`
(vllm/model_executor/layers/quantization/modelopt.py), per-module exclusions, and the KV cache
quantization the checkpoint declares (`kv_cache_quant_algo` / `kv_cache_scheme`), which vLLM's
`--kv-cache-dtype auto` then uses.

Bits per converted weight include the scales: NVFP4 is 4 bits plus one FP8 scale per 16 values
(4.5); MXFP8 8 bits plus an 8-bit exponent per 32 (8.25); FP8 8 (per-tensor scales are noise).
Excluded and listed modules are sorted into ParamCount groups by `quant_exclusions`.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from kvplan.spec.config_section import section
from kvplan.spec.quant import LINEAR_GROUPS, WeightQuant
from kvplan.spec.quant_exclusions import modules_by_group, share_pct

ALGO_BITS_X100 = {"FP8": 800, "FP8_PER_CHANNEL_PER_TOKEN": 800, "FP8_PB_WO": 800, "FP8_BLOCK": 800,
                  "NVFP4": 450, "W4A16_NVFP4": 450, "W4A8_NVFP4_FP8": 450, "NVFP4_AWQ": 450,
                  "MXFP8": 825, "MXFP4": 425, "INT8_SQ": 800, "INT8": 800, "W8A8": 800,
                  "W4A8_AWQ": 425, "W4A16_AWQ": 425, "INT4_AWQ": 425}
def _kv_dtype(q: dict[str, Any]) -> str | None:
    algo = q.get("kv_cache_quant_algo")
    scheme = q.get("kv_cache_scheme")
    if isinstance(algo, str) and algo.upper().startswith("FP8"):
        return "fp8"
    if isinstance(scheme, str) and scheme.upper().startswith("FP8"):
        return "fp8"
    if isinstance(scheme, dict) and scheme.get("type") == "float" and scheme.get("num_bits") == 8:
        return "fp8"
    return None


def modelopt_quant(q: dict[str, Any], config: dict[str, Any], layers_per_group: dict[str, int]) -> WeightQuant:
    """The weights and KV cache of a ModelOpt checkpoint (see the module doc)."""
    text = section(config, "text_config", config)
    all_layers = int(text.get("num_hidden_layers") or config.get("num_hidden_layers") or 1)
    n_layers = {g: layers_per_group.get(g) or all_layers for g in LINEAR_GROUPS}
    algo = str(q.get("quant_algo") or "").upper()
    kv = _kv_dtype(q)
    excluded = modules_by_group([str(x) for x in (q.get("exclude_modules") or q.get("ignore") or [])])
    if algo == "MIXED_PRECISION":
        return _mixed(q, n_layers, kv)
    bits = ALGO_BITS_X100.get(algo)
    if bits is None:
        return WeightQuant(kv_cache_dtype=kv, notes=(
            f"ModelOpt quant_algo {algo or '(none)'!r} is not modelled: weights planned in the model dtype",))
    groups = tuple(
        (g, bits, 100 - share_pct(excluded[g], n_layers[g]) if g in excluded else 100) for g in LINEAR_GROUPS
    )
    method = "fp8" if bits == 800 else algo.lower()
    return WeightQuant(method, bits, groups=groups, kv_cache_dtype=kv)


def _mixed(q: dict[str, Any], n_layers: dict[str, int], kv: str | None) -> WeightQuant:
    """MIXED_PRECISION: only the listed modules are converted, each by its own algorithm; a group's
    bits are the mean over its listed modules (modules of one group have one shape per layer)."""
    layers = q.get("quantized_layers") or {}
    algos = {str(name): str((spec or {}).get("quant_algo", "")).upper() for name, spec in layers.items()
             if isinstance(spec, dict)}
    notes, groups = [], []
    for group, names in modules_by_group(list(algos)).items():
        known = [ALGO_BITS_X100[algos[n]] for n in names if algos[n] in ALGO_BITS_X100]
        unknown = Counter(algos[n] for n in names if algos[n] not in ALGO_BITS_X100)
        if unknown:
            notes.append(f"ModelOpt quant_algo {', '.join(sorted(unknown))} in {group} is not modelled: "
                         "those modules planned in the model dtype")
        if known:
            pct = share_pct(names, n_layers[group]) * len(known) // len(names)
            groups.append((group, round(sum(known) / len(known)), pct))
    top = Counter(a for a in algos.values() if a in ALGO_BITS_X100).most_common(1)
    method = top[0][0].lower() if top else "mixed_precision"
    return WeightQuant(method if method != "fp8" else "fp8", max((b for _, b, _ in groups), default=0),
                       groups=tuple(groups) or tuple((g, 0, 0) for g in LINEAR_GROUPS),
                       kv_cache_dtype=kv, notes=tuple(notes))
