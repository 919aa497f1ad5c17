"""Whether kvplan has checked a model type's layout and parameter count. Each family module says how
it checked the model types it owns (`Family.checked`): "transformers" (CROSS_CHECKED: its text model
built on the meta device from a small config has kvplan's parameter count within 1% and its K/V widths
on every attention layer; the record is tests/data/transformers_crosscheck.json, rewritten by
tests/helpers/crosscheck_transformers.py and kept in agreement by tests/spec/test_transformers_crosscheck.py)
or "hand" (published checkpoints, vLLM start-up logs, tests outside that sweep). Any other model type
is planned as a generic decoder from its config keys, and the plan says so in a warning: a new
architecture whose config reads like a Llama is not planned silently.
"""
from __future__ import annotations

from kvplan.spec.families import MODEL_TYPE, Family, checked_types


def cross_checked() -> frozenset[str]:
    return checked_types("transformers")


def hand_checked() -> frozenset[str]:
    return checked_types("hand")


def unchecked_type_warning(family: Family, type_name: str) -> str | None:
    if family.has_checked(type_name):
        return None
    return (f"{MODEL_TYPE} {type_name!r} is not one kvplan has checked; planned as a generic decoder from its config "
            "keys, so an architecture-specific layer (a gate, a bias, a different MLP) would be missed")
