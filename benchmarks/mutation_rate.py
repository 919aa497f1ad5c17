"""The tests' mutation kill rate over core modules, with mutmut (a dev tool: `pip install mutmut`;
mutmut 3.8 runs under pytest <= 9.1: `pip install "mutmut==3.8" "pytest<9.2"`).

For each (mutant name glob, tests) pair below, a copy of the committed tree gets a `[tool.mutmut]`
section pointing at those tests, `mutmut run "<glob>"` mutates only that module's code (one-token
changes: operators, constants, strings, arguments) and runs the tests that cover each mutant, and
the killed / survived / untested counts of that module are printed. A survivor is a change no test
noticed: a missing test or an equivalent mutant (`mutmut show NAME` in the copy tells which).

    .venv/bin/python benchmarks/mutation_rate.py              # ~2.5 h on 2 cores
    .venv/bin/python benchmarks/mutation_rate.py --only kvpool --survivors   # and what survived
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {  # name -> (mutant glob, tests mutmut runs)
    "kvpool": ("kvplan.kvpool*", ["tests/kvpool/"]),
    "plan-kv": ("kvplan.plan.kv.*", ["tests/plan/"]),
    "plan-budget": ("kvplan.plan.budget*", ["tests/plan/"]),
    "replica-router": ("kvplan.stress.replica_router*", ["tests/stress/test_replica_router.py"]),
    "gate-checks": ("kvplan.gate.checks*", ["tests/gate/"]),
    "perf-gpu-cost": ("kvplan.perf.gpu_cost.*", ["tests/perf/test_gpu_cost.py"]),
    "perf-schedule": ("kvplan.perf.schedule.*", [
        "tests/perf/test_schedule.py", "tests/perf/test_reuse_blocks.py", "tests/perf/test_step_cost.py",
        "tests/perf/test_slo_watch.py", "tests/perf/test_decode_stretch.py"]),
    "perf-router": ("kvplan.perf.router.*", ["tests/perf/test_router.py"]),
    "perf-route-rule": ("kvplan.perf.route_rule.*", [
        "tests/perf/test_route_rule.py", "tests/perf/test_router.py", "tests/stress/test_replica_router.py"]),
    "perf-slo-watch": ("kvplan.perf.slo_watch.*", ["tests/perf/test_slo_watch.py"]),
    "sse-parser": ("kvplan.stress.targets.openai_stream*", [
        "tests/stress/targets/test_openai_stream.py", "tests/stress/targets/test_http1.py",
        "tests/stress/targets/test_http_target.py", "tests/stress/targets/test_faults.py"]),
}


def _copy(dest: Path) -> None:
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def _configure(copy: Path, tests: list[str]) -> None:
    # --timeout: a mutant that loops forever (a bisection that never narrows) fails its test in 60 s
    # instead of holding a worker for the whole run
    text = (copy / "pyproject.toml").read_text()
    text = text.replace("addopts = \"-ra -m 'not slow'\"", "addopts = \"-m 'not slow'\"")
    text += ("\n[tool.mutmut]\nsource_paths = [\"kvplan\"]\npaths_to_mutate = [\"kvplan/\"]\n"
             f"tests_dir = {tests!r}\n".replace("'", '"')
             + 'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x", "-p", "no:xdist", "--timeout=60"]\n'
             'also_copy = ["tests/", "profiles/", "scenarios/", "benchmarks/"]\n')
    (copy / "pyproject.toml").write_text(text)


def _print_survivors(copy: Path, env: dict[str, str], mutmut: str, results: str) -> None:
    """Each survivor's changed lines (`mutmut show`), to aim a test at it."""
    for line in results.splitlines():
        if line.strip().endswith(": survived"):
            name = line.strip().rsplit(":", 1)[0]
            shown = subprocess.run([mutmut, "show", name], cwd=copy, env=env, capture_output=True, text=True).stdout
            changed = [x for x in shown.splitlines() if x[:1] in "+-" and x[:3] not in ("+++", "---")]
            print(f"  survived {name}:\n    " + "\n    ".join(changed), flush=True)


def run(name: str, mutmut: str, children: int, survivors: bool = False) -> tuple[int, int, int]:
    glob, tests = TARGETS[name]
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        _copy(copy)
        _configure(copy, tests)
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        ran = subprocess.run([mutmut, "run", "--max-children", str(children), glob], cwd=copy, env=env,
                             capture_output=True, text=True)
        if ran.returncode:  # e.g. the clean run's tests fail (a pytest mutmut does not know): no figure
            tail = (ran.stdout + ran.stderr).strip().splitlines()[-3:]
            raise SystemExit(f"{name}: mutmut run failed (exit {ran.returncode}): " + " | ".join(tail))
        out = subprocess.run([mutmut, "results", "--all", "true"], cwd=copy, env=env, capture_output=True,
                             text=True).stdout
        if survivors:
            _print_survivors(copy, env, mutmut, out)
    prefix = glob.rstrip("*")
    counts = collections.Counter(line.split(":", 1)[1].strip().split()[0] for line in out.splitlines()
                                 if line.strip().startswith(prefix) and ":" in line)
    return counts["killed"], counts["survived"], counts["no"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=sorted(TARGETS), action="append")
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--survivors", action="store_true", help="print each surviving mutant's change")
    args = ap.parse_args()
    mutmut = shutil.which("mutmut") or str(Path(sys.executable).with_name("mutmut"))
    total_killed = total = 0
    for name in args.only or list(TARGETS):
        killed, survived, untested = run(name, mutmut, args.max_children, args.survivors)
        tested = killed + survived
        total_killed, total = total_killed + killed, total + tested
        print(f"{name:>12}: {killed:,} of {tested:,} killed ({100 * killed / max(tested, 1):.1f}%), "
              f"{untested:,} with no test", flush=True)
    print(f"{'together':>12}: {100 * total_killed / max(total, 1):.1f}%")


if __name__ == "__main__":
    main()
