"""Acme (`acme`, vLLM acme.py; the worked example of docs/architecture.md, as it would be dropped into
kvplan/spec/families/): every layer full attention plus a pooled cache of one entry per `pool_stride` tokens."""
from __future__ import annotations

from typing import Any

from kvplan.spec.cache import FullAttention
from kvplan.spec.cache.pooled import PooledKeys  # the test lends kvplan.spec.cache this folder
from kvplan.spec.families.family import Family
from kvplan.spec.layer import Layer


def acme_layers(cfg: dict[str, Any], n_layers: int, n_heads: int, head_dim: int, where: str) -> tuple[Layer, ...]:
    kv = int(cfg.get("num_key_value_heads") or n_heads)
    pooled = PooledKeys(kv, head_dim, int(cfg["pool_stride"]))
    return tuple(Layer.of(FullAttention(kv, head_dim, head_dim), pooled) for _ in range(n_layers))


FAMILY = Family(frozenset({"acme"}), "vllm/model_executor/models/acme.py", checked="hand",
                layers=acme_layers, read_keys=frozenset({"pool_stride"}))
