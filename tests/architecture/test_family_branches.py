"""Per-family branches live in the family modules (kvplan/spec/families/): this test lists every
`model_type` comparison outside them and fails on one that is not in the recorded list below the
test (tests/architecture/model_type_branches.txt) — a new family goes in a module of its own, and a
branch moved into one is taken off the list (a stale entry fails too, so the list only shrinks)."""
from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "kvplan"
RECORDED = Path(__file__).resolve().parent / "model_type_branches.txt"


def _is_model_type(node: ast.expr) -> bool:
    text = ast.unparse(node)
    return text in ("mt", "model_type") or "model_type" in text


def model_type_branches(path: Path) -> Counter[str]:
    """`file: comparison` for each comparison of a model type with something (literal or set)."""
    found: Counter[str] = Counter()
    tree = ast.parse(path.read_text())
    rel = path.relative_to(ROOT).as_posix()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_is_model_type(n) for n in [node.left, *node.comparators]):
            found[f"{rel}: {' '.join(ast.unparse(node).split())}"] += 1
    return found


def current() -> Counter[str]:
    total: Counter[str] = Counter()
    for path in sorted(PKG.rglob("*.py")):
        # checked_types.py is the list of verified model types (the warning for any other), not a branch
        if "families" not in path.relative_to(PKG).parts and path.name != "checked_types.py":
            total += model_type_branches(path)
    return total


def recorded() -> Counter[str]:
    lines = [line for line in RECORDED.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return Counter(lines)


def test_no_new_family_branch_outside_the_family_modules() -> None:
    new = current() - recorded()
    assert not new, ("model_type branches outside kvplan/spec/families/ (give the family a module there):\n"
                     + "\n".join(sorted(new.elements())))


def test_the_recorded_list_is_not_stale() -> None:
    stale = recorded() - current()
    assert not stale, "recorded branches that no longer exist (take them off the list):\n" + "\n".join(
        sorted(stale.elements())
    )


def test_the_branch_finder_sees_a_branch() -> None:
    code = 'def f(cfg):\n    mt = cfg.get("model_type")\n    if mt in ("qwen3", "llama"):\n        return 1\n'
    path = ROOT / "tests" / "architecture" / "_probe_branch.py"
    path.write_text(code)
    try:
        assert list(model_type_branches(path)) == ["tests/architecture/_probe_branch.py: mt in ('qwen3', 'llama')"]
    finally:
        path.unlink()
