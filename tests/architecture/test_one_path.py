"""One path for each thing: no module reaches into another module's private names, and no settings
check is written twice (the same refusal, word for word, in two places drifts apart)."""
from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "kvplan"
ERRORS = {"KvplanError", "ConfigError", "FieldIssue"}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT)
        yield ".".join(rel.with_suffix("").parts).removesuffix(".__init__"), ast.parse(path.read_text(), str(rel))


def private_imports(module: str, tree: ast.Module) -> list[str]:
    """`from kvplan.other import _name` in `module` (its own submodules excepted)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvplan") and node.level == 0:
            if node.module == module or node.module.startswith(module + "."):
                continue
            found += [f"{module}: from {node.module} import {a.name} (line {node.lineno})"
                      for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_imports_a_private_name_of_another() -> None:
    found = [line for module, tree in _modules() for line in private_imports(module, tree)]
    assert not found, "private names imported across modules (make them public or move them):\n" + "\n".join(found)


def test_the_private_import_check_can_fail() -> None:
    tree = ast.parse("from kvplan.cli.plan_commands import _engine_args\nfrom kvplan.cli.app import app\n")
    assert private_imports("kvplan.cli.perf_commands", tree) == [
        "kvplan.cli.perf_commands: from kvplan.cli.plan_commands import _engine_args (line 1)"]


def _template(node: ast.expr) -> str | None:
    """A refusal's text with every interpolated value as {} (None: not a literal)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        return None if left is None or right is None else left + right
    return None


def settings_checks(module: str, tree: ast.Module) -> Iterator[tuple[str, str]]:
    """(template, where) of each refusal that names a flag or a settings field: `raise
    KvplanError("--flag ...")` and pydantic's field messages."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
            continue
        func = node.exc.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        text = _template(node.exc.args[-1]) if name in ERRORS else None
        if text and (text.startswith("--") or text.startswith("give either")):
            yield " ".join(text.split()), f"{module}:{node.lineno}"


def test_each_settings_check_is_written_once() -> None:
    places: dict[str, list[str]] = defaultdict(list)
    for module, tree in _modules():
        for text, where in settings_checks(module, tree):
            places[text].append(where)
    twice = {t: w for t, w in places.items() if len(w) > 1}
    assert places, "no settings check found: the scan is broken"
    assert not twice, "the same settings check in two places:\n" + "\n".join(f"{t!r}: {w}" for t, w in twice.items())


def test_the_twice_check_can_fail() -> None:
    code = ('def a(v):\n    raise KvplanError(f"--block-size must be positive, got {v}")\n'
            'def b(v):\n    raise KvplanError(f"--block-size must be positive, got {v!r}")\n')
    found = list(settings_checks("m", ast.parse(code)))
    assert [t for t, _ in found] == ["--block-size must be positive, got {}"] * 2


# a dataset module's `read` is the registry's interface (one file per dataset, kvplan.workload.datasets)
SHARED_NAMES = {"read"}


def top_level_names(tree: ast.Module) -> list[str]:
    """The public functions and classes a module defines at its top level."""
    return [n.name for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and not n.name.startswith("_")]


def test_each_public_name_is_defined_once_in_the_package() -> None:
    """One owner per concept: two `predict`s or two `StepCost`s make a reader guess which is meant."""
    places: dict[str, list[str]] = defaultdict(list)
    for module, tree in _modules():
        for name in top_level_names(tree):
            places[name].append(module)
    twice = {n: m for n, m in places.items() if len(m) > 1 and n not in SHARED_NAMES}
    assert len(places) > 500, "the scan is broken"
    assert not twice, "defined in more than one module:\n" + "\n".join(f"{n}: {m}" for n, m in sorted(twice.items()))


def test_the_defined_once_check_can_fail() -> None:
    assert top_level_names(ast.parse("def predict(): ...\nclass StepCost: ...\ndef _own(): ...\nx = 1\n")) == [
        "predict", "StepCost"]
