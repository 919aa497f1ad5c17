import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, configuration, settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _throwaway_dir(prefix: str) -> str:
    """A temporary folder, removed when this test process exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(functools.partial(shutil.rmtree, path, ignore_errors=True))
    return path


# calibrations written by tests go to a throwaway folder, never the user's data folder
if "KVPLAN_HOME" not in os.environ:
    os.environ["KVPLAN_HOME"] = _throwaway_dir("kvplan-test-home-")

# property tests keep no example database, and hypothesis its own files, out of the checkout; and
# no wall-clock limit (a per-example deadline, the slow-generation check): those fail on a loaded
# machine or under a mutation tool's instrumentation, and no test asserts time
configuration.set_hypothesis_home_dir(_throwaway_dir("kvplan-test-hypothesis-"))
settings.register_profile("kvplan", database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kvplan")

pytest_plugins = ["server_fixtures", "run_results"]  # tests/helpers: servers and synthetic results

REFERENCE = Path(__file__).resolve().parent / "data" / "reference"  # copies; see SOURCES.md there


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    return REFERENCE


# --- the fuzz suite's case count, summed over xdist workers (tests/fuzz/conftest.py records it) ----
FUZZ_DIR = Path(__file__).resolve().parent / "fuzz"
MIN_FUZZ_CASES = 1000  # per run of the whole fuzz suite (CLI, files, serve bodies, target streams)
_FUZZ_CASES: dict[str, int] = {}
_FUZZ_TESTS_RUN: set[str] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "fuzz/" not in report.nodeid:
        return
    if report.when == "call":
        _FUZZ_TESTS_RUN.add(report.nodeid.split("[")[0])
    if report.when == "teardown":  # the count is added while the test's fixtures are torn down
        for name, value in report.user_properties:
            if name == "fuzz_cases":
                for kind, n in value.items():
                    _FUZZ_CASES[kind] = _FUZZ_CASES.get(kind, 0) + n


def _fuzz_tests() -> set[str]:
    import ast

    return {
        f"{p.stem}::{node.name}"
        for p in FUZZ_DIR.glob("test_*.py")
        for node in ast.parse(p.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


def pytest_terminal_summary(terminalreporter) -> None:
    if _FUZZ_CASES:
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(_FUZZ_CASES.items()))
        terminalreporter.write_line(f"kvplan fuzz: {sum(_FUZZ_CASES.values()):,} generated cases ({kinds}); every case "
                                    "checked for tracebacks, exit codes and files written (failures are listed above)")


ROOT = Path(__file__).resolve().parents[1]
_TREE_BEFORE: set[str] = set()


def _tree() -> set[str]:
    """Files in the checkout that git does not track (ignored ones too), caches and the venv aside."""
    import subprocess

    done = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    skip = (".venv/", ".mypy_cache/", ".ruff_cache/", ".pytest_cache/", "__pycache__", ".egg-info/", ".grimp_cache/")
    return {line[3:] for line in done.stdout.splitlines()
            if line[:2] in ("??", "!!") and not any(s in line for s in skip)}


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        _TREE_BEFORE.update(_tree())


def _wrote_into_the_checkout(session: pytest.Session) -> None:
    """A test that wrote into the source tree fails the run (tests write under tmp_path)."""
    if hasattr(session.config, "workerinput") or not (ROOT / ".git").exists():
        return
    new = sorted(_tree() - _TREE_BEFORE)
    if new:
        session.config.get_terminal_writer().line(f"tests wrote into the checkout: {', '.join(new[:10])}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_sessionfinish(session: pytest.Session) -> None:
    _wrote_into_the_checkout(session)
    """The whole fuzz suite ran (on however many workers) but generated too few cases: the run fails."""
    ran = {n.split("/")[-1].replace(".py", "") for n in _FUZZ_TESTS_RUN}
    total = sum(_FUZZ_CASES.values())
    if hasattr(session.config, "workerinput") or not ran or ran != _fuzz_tests() or total >= MIN_FUZZ_CASES:
        return
    session.config.get_terminal_writer().line(
        f"kvplan fuzz: only {total} generated cases, fewer than {MIN_FUZZ_CASES}", red=True
    )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
