"""Family knowledge lives in the family modules (kvplan/spec/families/): outside them no source line
names the model-type key, and no code compares a config's type (read through the `MODEL_TYPE` constant
or `type_of`) with anything. The dispatch that selects a family (`family_of`, `tower_of`) is the only
reader, in kvplan/spec/families/__init__.py."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "kvplan"
KEY = "model" + "_type"  # spelled apart so this test file is not a hit of its own search


def _outside_families() -> list[Path]:
    return [p for p in sorted(PKG.rglob("*.py")) if "families" not in p.relative_to(PKG).parts]


def type_comparisons(source: str) -> list[str]:
    """Comparisons that involve a config's type: `MODEL_TYPE`, `type_of(...)`, `.type_name`, or the key."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            text = ast.unparse(node)
            if any(mark in text for mark in ("MODEL_TYPE", "type_of(", "type_name", KEY)):
                found.append(" ".join(text.split()))
    return found


def test_no_line_outside_the_families_names_the_model_type_key() -> None:
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in _outside_families()
            for i, line in enumerate(p.read_text().splitlines(), 1) if KEY in line]
    assert not hits, "the model-type key outside kvplan/spec/families/ (give the rule to a family):\n" + "\n".join(hits)


def test_no_code_outside_the_families_compares_a_model_type() -> None:
    hits = [f"{p.relative_to(ROOT)}: {c}" for p in _outside_families() for c in type_comparisons(p.read_text())]
    assert not hits, "model-type comparisons outside kvplan/spec/families/:\n" + "\n".join(hits)


def test_the_comparison_finder_sees_one() -> None:
    code = 'def f(cfg):\n    if type_of(cfg) in ("qwen3", "llama"):\n        return 1\n'
    assert type_comparisons(code) == ["type_of(cfg) in ('qwen3', 'llama')"]
    assert type_comparisons("x = spec.type_name == 'gemma3'\n") == ["spec.type_name == 'gemma3'"]
