"""One module per model family whose layout the generic decoder rules cannot express: its layer
kinds, KV heads per layer and parameter count, with the vLLM model file it follows cited. Each
module exports a `FAMILY`; the generic code asks `family_of(config)` and never compares model
types itself (tests/architecture/test_family_branches.py keeps the old comparisons from growing).

Modules: family.py (the `Family` record), nemotron_nas.py (Llama-3.x-Nemotron Super/Ultra:
per-block `block_configs`), mimo_v2.py (MiMo-V2-Flash: sliding and full layers of their own
geometry, MoE per layer).
"""
from __future__ import annotations

from typing import Any

from kvplan.spec.families import mimo_v2, nemotron_nas
from kvplan.spec.families.family import Family

FAMILIES: tuple[Family, ...] = (nemotron_nas.FAMILY, mimo_v2.FAMILY)
_BY_TYPE = {t: f for f in FAMILIES for t in f.model_types}


def family_of(cfg: dict[str, Any]) -> Family | None:
    """The family module that owns this (text) config's `model_type`, if one does."""
    return _BY_TYPE.get(str(cfg.get("model_type", "")))
