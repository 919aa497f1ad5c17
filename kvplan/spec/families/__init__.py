"""One module per model family: every rule that depends on which model a config describes lives in
the family's module (its layer layout, parameter count, mixers, defaults, vision tower, what vLLM's
forward pass adds). Modules are discovered, not listed: a module exports `FAMILY` (or `FAMILIES`)
and, for a vision encoder, `TOWER` (or `TOWERS`). The generic code asks `family_of(config)` or
`tower_of(config)` and never reads the model type itself: this module is the only dispatch on it
(tests/architecture/test_family_branches.py).

family.py holds the `Family` and `Traits` records, tower.py the `Tower` record; every other module
is a family or a tower. A model type no module owns is planned by the generic decoder rules with a
warning that it was not checked.
"""
from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import TYPE_CHECKING, Any

from kvplan.spec.config_section import section
from kvplan.spec.families.family import Family, Geometry, Traits

if TYPE_CHECKING:
    from kvplan.spec.families.tower import Tower

MODEL_TYPE = "model_type"  # the config key that names a model's family (transformers' and vLLM's)
GENERIC = Family(frozenset(), "vllm/model_executor/models/llama.py")  # a decoder no module owns
_RECORDS = ("family", "tower")

__all__ = ["GENERIC", "MODEL_TYPE", "Family", "Geometry", "Traits", "all_families", "all_towers", "checked_types",
           "family_of", "owner_of", "tower_of", "type_of"]


@cache
def _modules() -> tuple[Any, ...]:
    """Every family module of this package, imported on first use (in name order)."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _RECORDS)
    return tuple(importlib.import_module(f"{__name__}.{n}") for n in names)


def _exports(one: str, many: str) -> tuple[Any, ...]:
    out: list[Any] = []
    for module in _modules():
        out += list(getattr(module, many, ())) or ([getattr(module, one)] if hasattr(module, one) else [])
    return tuple(out)


@cache
def all_families() -> tuple[Family, ...]:
    return _exports("FAMILY", "FAMILIES")


@cache
def all_towers() -> tuple[Tower, ...]:
    return _exports("TOWER", "TOWERS")


@cache
def _by_type() -> dict[str, Family]:
    table: dict[str, Family] = {}
    for family in all_families():
        for t in family.model_types:
            if t in table:
                raise RuntimeError(f"model_type {t!r} is owned by two family modules")
            table[t] = family
    return table


@cache
def _by_arch() -> dict[str, Family]:
    return {a: f for f in all_families() for a in f.architectures}


def type_of(cfg: dict[str, Any], default: str = "") -> str:
    """The config's model type, as a string (default when it names none)."""
    value = cfg.get(MODEL_TYPE)
    return str(value) if value is not None else default


def owner_of(cfg: dict[str, Any]) -> Family | None:
    """The family module that owns this (text) config's model type or first architecture, if one does
    (a re-packaged checkpoint may rename its model type: sgl-project's DeepSeek-V4 says `deepseek_ref`)."""
    family = _by_type().get(type_of(cfg))
    archs = cfg.get("architectures")
    if family is None and isinstance(archs, list) and archs:
        family = _by_arch().get(str(archs[0]))
    return family


def family_of(cfg: dict[str, Any]) -> Family:
    """The owning family, else the generic decoder (every rule its default)."""
    return owner_of(cfg) or GENERIC


def tower_of(outer: dict[str, Any]) -> Tower | None:
    """The vision tower of a multimodal config: the one that owns `vision_config`'s model type, else
    the one the decoder's checkpoints carry; None when neither is known (the generic ViT count)."""
    vision = section(outer, "vision_config")
    vt, mt = type_of(vision), type_of(outer)
    towers = all_towers()
    found = next((t for t in towers if t.owns_vision_type(vt)), None)
    return found or next((t for t in towers if t.carried_by(mt)), None)


def checked_types(how: str) -> frozenset[str]:
    """The model types checked `how` ("transformers" or "hand"), from the owning modules."""
    return frozenset(t for f in all_families() if f.checked == how for t in f.model_types - f.unchecked)
