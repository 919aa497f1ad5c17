"""Build every causal-LM architecture transformers knows on the meta device (shapes only) from a
small config, and compare it with kvplan's spec of the same config: parameter count, and the K/V
projection widths of each attention layer against kvplan's KV heads x head size.

Run as a script to rewrite the record (tests/data/transformers_crosscheck.json) after a fix:
    .venv/bin/python tests/helpers/crosscheck_transformers.py --write
"""
from __future__ import annotations

import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

RECORD = Path(__file__).resolve().parents[1] / "data" / "transformers_crosscheck.json"
SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=320, num_hidden_layers=2,
             intermediate_size=96, head_dim=16)
_LAYER = re.compile(r"\.layers?\.(\d+)\.")
_TOWER = re.compile(r"vision|visual|multi_modal_projector|mm_projector|audio|image_newline|vqmodel|patch_embed")


def _model(model_type: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    base = AutoConfig.for_model(model_type)
    cfg = AutoConfig.for_model(model_type, **{k: v for k, v in SMALL.items() if hasattr(base, k)})
    with torch.device("meta"):
        return cfg, AutoModelForCausalLM.from_config(cfg)


def _kv_widths(model: Any) -> dict[int, tuple[int, int]]:
    """Layer index -> (k_proj, v_proj) output widths, for layers with separate K and V projections."""
    k: dict[int, int] = {}
    v: dict[int, int] = {}
    for name, module in model.named_modules():
        m = _LAYER.search(name + ".")
        if m is None or not hasattr(module, "out_features") or "vision" in name or "encoder" in name:
            continue
        if name.endswith("self_attn.k_proj") or name.endswith("attention.k_proj"):
            k[int(m.group(1))] = int(module.out_features)
        elif name.endswith("self_attn.v_proj") or name.endswith("attention.v_proj"):
            v[int(m.group(1))] = int(module.out_features)
    return {i: (k[i], v[i]) for i in k if i in v}


def check(model_type: str) -> dict[str, Any]:
    """{'params': relative error of kvplan's text-decoder count (0.0: equal), 'kv_layers_off': layers whose K/V widths
    differ, 'warned': whether kvplan's spec carries a warning}, or {'skip': why} when transformers cannot
    build it from a small config or kvplan refuses the config (a one-line error is not a silent answer)."""
    from kvplan.errors import KvplanError
    from kvplan.spec.model import spec_from_config

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg, model = _model(model_type)
    except Exception as exc:  # noqa: BLE001 - any failure of a third-party build is "transformers cannot"
        return {"skip": f"transformers: {type(exc).__name__}"}
    try:
        spec = spec_from_config(cfg.to_dict(), model_type)
    except KvplanError:
        return {"skip": "kvplan refuses it"}
    # the text decoder alone: a default vision / audio tower dwarfs a small decoder and is estimated apart
    hf = sum(p.numel() for name, p in model.named_parameters() if not _TOWER.search(name))
    off = sum(1 for i, (kw, vw) in _kv_widths(model).items()
              if i < len(spec.layers) and spec.layers[i].kind in ("full", "sliding", "chunked")
              and (kw, vw) != (spec.layers[i].num_kv_heads * spec.layers[i].head_dim_k,
                               spec.layers[i].num_kv_heads * spec.layers[i].head_dim_v))
    return {"params": round(spec.params.decoder / hf - 1, 6), "kv_layers_off": off, "warned": bool(spec.warnings),
            "text_model_type": spec.type_name}


def causal_lm_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


if __name__ == "__main__":
    import transformers

    transformers.logging.set_verbosity_error()
    result = {"transformers": transformers.__version__, "models": {t: check(t) for t in causal_lm_types()}}
    if "--write" in sys.argv:
        RECORD.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, indent=1, sort_keys=True))
