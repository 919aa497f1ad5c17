"""Each package's docstring is the map of its modules: it names every module it holds (`name.py`)
and none that does not exist, so a moved or new module cannot leave the map stale."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "kvplan"
PACKAGES = sorted(p.parent for p in PKG.rglob("__init__.py") if p.parent != PKG)


def named_modules(doc: str) -> set[str]:
    return set(re.findall(r"(?<![\w/.])([a-z_][a-z0-9_]*)\.py\b", doc))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(PKG)))
def test_package_docstring_names_its_modules(package: Path) -> None:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    named = named_modules(doc)
    assert modules - named == set(), f"{package.name}: modules the docstring does not name"
    assert named - modules == set(), f"{package.name}: the docstring names modules that do not exist"


def test_the_map_check_reads_module_names() -> None:
    assert named_modules("Modules: kv.py (bytes), budget.py; see benchmarks/gpu_cost_fit.py") == {"kv", "budget"}
