"""The repository's top level is what a reader looks for (pyproject.toml, kvplan/, profiles/,
scenarios/, tests/, reports/, with README.md, docs/, benchmarks/ and .ci/), and pyproject.toml ships
every package on disk, profiles/ and scenarios/ as kvplan.profiles and kvplan.scenarios."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = {"pyproject.toml", "kvplan", "profiles", "scenarios", "tests", "reports", "README.md", "docs",
             "benchmarks", ".ci", ".gitignore"}


def test_top_level_entries() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False).stdout
    if not tracked:  # not a git checkout (an sdist): the folders on disk
        entries = {p.name for p in ROOT.iterdir() if not p.name.startswith(".") or p.name in (".ci", ".gitignore")}
    else:
        entries = {line.split("/")[0] for line in tracked.splitlines()}
    assert entries <= TOP_LEVEL, sorted(entries - TOP_LEVEL)
    assert {"kvplan", "profiles", "scenarios", "tests", "reports", "pyproject.toml"} <= entries


def test_pyproject_ships_every_package() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "kvplan").rglob("__init__.py")}
    assert set(config["packages"]) == on_disk | {"kvplan.profiles", "kvplan.scenarios"}
    assert config["package-dir"] == {"kvplan.profiles": "profiles", "kvplan.scenarios": "scenarios"}
