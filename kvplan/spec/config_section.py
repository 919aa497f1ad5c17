"""A nested block of a config.json (`text_config`, `attn_config`, a NAS block's `attention`): the
mapping when the key holds one, else empty, so a family rule reads it without type checks."""
from __future__ import annotations

from typing import Any


def section(cfg: dict[str, Any], key: str, default: dict[str, Any] | None = None) -> dict[str, Any]:
    """cfg[key] when it is a mapping, else `default` (an empty mapping when not given)."""
    value = cfg.get(key)
    if isinstance(value, dict):
        return value
    return {} if default is None else default
