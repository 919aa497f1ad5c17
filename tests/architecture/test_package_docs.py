"""Each package's docstring is the map of its modules: it names every module it holds (`name.py`)
and none that does not exist, so a moved or new module cannot leave the map stale. The family modules
are discovered, not listed, and a cache kind is imported from its own module (adding a family with a
new cache kind touches only those two modules and their tests): there each module's own docstring says
what it covers, and each has a test of its own."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "kvplan"
FAMILIES = PKG / "spec" / "families"
CACHES = PKG / "spec" / "cache"
PACKAGES = sorted(p.parent for p in PKG.rglob("__init__.py") if p.parent not in (PKG, FAMILIES, CACHES))


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


@pytest.mark.parametrize("module", sorted(FAMILIES.glob("*.py")), ids=lambda p: p.stem)
def test_each_family_module_says_what_it_covers(module: Path) -> None:
    doc = ast.get_docstring(ast.parse(module.read_text())) or ""
    assert len(doc.split()) >= 8, f"{module.name}: a docstring saying which models it covers and how"
    if module.stem not in ("__init__", "family", "tower"):
        source = module.read_text()
        assert "FAMIL" in source or "TOWER" in source, f"{module.name}: exports no FAMILY/FAMILIES or TOWER/TOWERS"


RECORDS = ("__init__", "family", "tower")


FAMILY_MODULES = sorted(p for p in FAMILIES.glob("*.py") if p.stem not in RECORDS)


@pytest.mark.parametrize("module", FAMILY_MODULES, ids=lambda p: p.stem)
def test_each_family_module_has_its_own_test(module: Path) -> None:
    test = PKG.parent / "tests" / "spec" / "families" / f"test_{module.stem}.py"
    assert test.exists(), f"{module.name}: add {test.relative_to(PKG.parent)} (an oracle test of its rules)"


CACHE_MODULES = sorted(p for p in CACHES.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", CACHE_MODULES, ids=lambda p: p.stem)
def test_each_cache_kind_module_is_documented_and_tested(module: Path) -> None:
    doc = ast.get_docstring(ast.parse(module.read_text())) or ""
    assert len(doc.split()) >= 8, f"{module.name}: a docstring saying what the kind caches, after vLLM's spec"
    test = PKG.parent / "tests" / "spec" / "cache" / f"test_{module.stem}.py"
    assert test.exists(), f"{module.name}: add {test.relative_to(PKG.parent)} (an oracle test from vLLM's spec)"
