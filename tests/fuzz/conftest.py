"""The fuzz suite prints how many generated cases it ran (and of which kind) at the end of the session."""
from __future__ import annotations

import pytest

from harness import CASES, engine_stops


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch):
    engine_stops(monkeypatch)


def pytest_terminal_summary(terminalreporter) -> None:
    if CASES:
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(CASES.items()))
        terminalreporter.write_line(f"kvplan fuzz: {sum(CASES.values()):,} generated cases ({kinds}); "
                                    "every case checked for tracebacks, exit codes and files written (failures are listed above)")
