import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# calibrations written by tests go to a throwaway folder, never the user's data folder
os.environ.setdefault("KVPLAN_HOME", tempfile.mkdtemp(prefix="kvplan-test-home-"))

from pathlib import Path

import pytest

pytest_plugins = ["server_fixtures", "run_results"]  # tests/helpers: servers and synthetic results

REFERENCE = Path(__file__).resolve().parent / "data" / "reference"  # copies; see SOURCES.md there


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    return REFERENCE


# --- tests that time the machine run alone -------------------------------------------------------
# Under pytest-xdist (`-n 2`) two tests run at once. A test marked `serial` (it compares CPU timings,
# e.g. the CI gate beside a CPU hog) must not share the cores with another test, or the neighbour's
# load is part of what it measures. A readers-writer lock over files all workers see: every other
# test holds it shared; a serial test takes it exclusively, first taking an "intent" lock that new
# tests queue behind, so a stream of short tests cannot starve it.
def _lock_dir(factory: pytest.TempPathFactory) -> Path:
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(autouse=True)
def _serial_or_shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    import fcntl

    folder = _lock_dir(tmp_path_factory)
    serial = request.node.get_closest_marker("serial") is not None
    with open(folder / "kvplan-serial.intent", "a") as intent, open(folder / "kvplan-serial.lock", "a") as lock:
        if serial:
            fcntl.flock(intent, fcntl.LOCK_EX)
            fcntl.flock(lock, fcntl.LOCK_EX)
        else:
            fcntl.flock(intent, fcntl.LOCK_SH)
            fcntl.flock(lock, fcntl.LOCK_SH)
            fcntl.flock(intent, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if serial:
                fcntl.flock(intent, fcntl.LOCK_UN)


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


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The whole fuzz suite ran (on however many workers) but generated too few cases: the run fails."""
    ran = {n.split("/")[-1].replace(".py", "") for n in _FUZZ_TESTS_RUN}
    total = sum(_FUZZ_CASES.values())
    if hasattr(session.config, "workerinput") or not ran or ran != _fuzz_tests() or total >= MIN_FUZZ_CASES:
        return
    session.config.get_terminal_writer().line(
        f"kvplan fuzz: only {total} generated cases, fewer than {MIN_FUZZ_CASES}", red=True
    )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
