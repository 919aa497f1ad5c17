"""Realistic one-line bugs in kvplan's core rules, each run against the tests aimed at it: every one
must be killed (a test fails). Run on a copy of the checkout, never in it:

    .venv/bin/python benchmarks/mutations.py            # all, one line each: killed / SURVIVED

The first four are the ones a review found surviving every test; the rest are of the same kind.
Exit 1 if any survives. The broad kill rate over the core modules comes from mutmut (docs/benchmarks.md).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS = (
    Mutation("prefix-cache block hash not chained to its parent", "kvplan/workload/prefix_cache.py",
             "parent = hash((parent, ids[b * block_size:(b + 1) * block_size]))",
             "parent = hash(ids[b * block_size:(b + 1) * block_size])", ("tests/workload/test_prefix_cache.py",)),
    Mutation("LogGrid keeps the mean kernel, not the fastest", "kvplan/perf/kernel_tables.py",
             "frame.groupby(axes, as_index=False)[value].min()", "frame.groupby(axes, as_index=False)[value].mean()",
             ("tests/perf/test_kernel_tables.py",)),
    Mutation("gate prediction check with reference and value swapped", "kvplan/gate/checks.py",
             "ok = tol.allows(measured, predicted)", "ok = tol.allows(predicted, measured)",
             ("tests/gate/test_checks.py",)),
    Mutation("SSE `data:` read as if a space always followed", "kvplan/stress/targets/openai_stream.py",
             "event(p, line[5:].strip(), t_s)", "event(p, line[6:].strip(), t_s)",
             ("tests/stress/targets/test_openai_stream.py",)),
    Mutation("KV budget leaves out non-torch memory", "kvplan/plan/budget.py",
             "avail = requested - w - a - nt - (cg if subtract_graphs else 0)",
             "avail = requested - w - a - (cg if subtract_graphs else 0)", ("tests/plan/test_budget.py",)),
    Mutation("block pool evicts the most recently freed cached block", "kvplan/engine/block_manager.py",
             "self._cached.popitem(last=False)", "self._cached.popitem(last=True)",
             ("tests/engine/test_block_manager.py",)),
    Mutation("SSE line split across reads loses its first part", "kvplan/stress/targets/openai_stream.py",
             "buffer = buffer + data if buffer else data", "buffer = data",
             ("tests/stress/targets/test_openai_stream.py",)),
    Mutation("ramped arrivals: the ramp's cumulative load halved", "kvplan/workload/arrivals.py",
             "return math.sqrt(2 * ramp_s * full_rate_s)", "return math.sqrt(ramp_s * full_rate_s)",
             ("tests/workload/test_arrivals.py",)),
    Mutation("a '-20%' tolerance read as '+20%'", "kvplan/gate/tolerance.py",
             "return value >= reference - slack", "return value <= reference + slack",
             ("tests/gate/test_checks.py",)),
)


def _copy() -> Path:
    dest = Path(tempfile.mkdtemp(prefix="kvplan-mutations-"))
    ignore = shutil.ignore_patterns(".venv", ".git", "reports", "__pycache__", "*.egg-info", ".hypothesis")
    for name in ("kvplan", "tests", "profiles", "scenarios", "benchmarks", "pyproject.toml"):
        src = ROOT / name
        (shutil.copytree(src, dest / name, ignore=ignore) if src.is_dir() else shutil.copy2(src, dest / name))
    return dest


def run(m: Mutation, copy: Path) -> bool:
    """True when a test fails with the mutation in place (the copy is restored after)."""
    path = copy / m.path
    original = path.read_text()
    if original.count(m.old) != 1:
        raise SystemExit(f"{m.name}: the line to mutate is not once in {m.path}; update benchmarks/mutations.py")
    path.write_text(original.replace(m.old, m.new))
    try:
        env = {**os.environ, "PYTHONPATH": str(copy), "HF_HUB_OFFLINE": "1"}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "",
                               *m.tests], cwd=copy, env=env, capture_output=True, text=True, timeout=900)
        return done.returncode == 1  # a test failed (2+ would be a broken run, not a kill)
    finally:
        path.write_text(original)


def main() -> int:
    copy = _copy()
    try:
        check = subprocess.run([sys.executable, "-c", "import kvplan; print(kvplan.__file__)"], cwd=copy,
                               env={**os.environ, "PYTHONPATH": str(copy)}, capture_output=True, text=True)
        assert check.stdout.strip().startswith(str(copy)), f"the copy is not the kvplan imported: {check.stdout}"
        survived = 0
        for m in MUTATIONS:
            killed = run(m, copy)
            survived += not killed
            print(f"{'killed  ' if killed else 'SURVIVED'}  {m.name}  ({m.path}; {', '.join(m.tests)})", flush=True)
        print(f"{len(MUTATIONS) - survived} of {len(MUTATIONS)} killed")
        return 1 if survived else 0
    finally:
        shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
