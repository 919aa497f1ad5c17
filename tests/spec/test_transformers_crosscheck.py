"""kvplan against transformers' own modules, for every causal-LM architecture transformers can build
small on the meta device (crosscheck_transformers.py): a model type kvplan calls checked has its
parameter count within 1% and its K/V widths exact, else the plan warns; the exact ones stay exact."""
from __future__ import annotations

import json

import pytest
from crosscheck_transformers import RECORD, causal_lm_types, check

from kvplan.spec.checked_types import cross_checked

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOLERANCE = 0.01


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    transformers.logging.set_verbosity_error()
    return {t: check(t) for t in causal_lm_types()}


def test_never_silently_off(results: dict[str, dict]) -> None:
    """Every architecture transformers builds: kvplan's count within 1% with the right K/V widths,
    or a warning on the plan (an unchecked model type always gets one)."""
    silent = {t: r for t, r in results.items() if "skip" not in r and not r["warned"]
              and (abs(r["params"]) > TOLERANCE or r["kv_layers_off"])}
    assert not silent, f"planned off without a warning: {silent}"


def test_checked_types_are_right(results: dict[str, dict]) -> None:
    """Each type on the CROSS_CHECKED list is within 1% with exact K/V widths on some architecture
    whose text decoder it is (so the list cannot name a type kvplan gets wrong)."""
    good = {r["text_model_type"] for r in results.values()
            if "skip" not in r and abs(r["params"]) <= TOLERANCE and not r["kv_layers_off"]}
    assert cross_checked() <= good, sorted(cross_checked() - good)
    assert len(good) >= 90  # of ~200 causal-LM architectures (56 not buildable small, or refused)


def test_exact_ones_stay_exact(results: dict[str, dict]) -> None:
    record = json.loads(RECORD.read_text())
    if record["transformers"] != transformers.__version__:
        pytest.skip(f"record made with transformers {record['transformers']}, not {transformers.__version__}")
    exact = [t for t, r in record["models"].items() if r.get("params") == 0 and not r.get("kv_layers_off")]
    assert len(exact) >= 60
    drifted = {t: results[t] for t in exact if results[t].get("params") != 0 or results[t].get("kv_layers_off")}
    assert not drifted, f"exact in the record, off now: {drifted}"
