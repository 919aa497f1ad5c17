"""The fuzz suite prints how many generated cases it ran (and of which kind) at the end of the session."""
from __future__ import annotations

import pytest

from harness import CASES, engine_stops


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch):
    engine_stops(monkeypatch)


_COMMANDS: dict[int, object] = {}


@pytest.fixture(autouse=True)
def _command_built_once(monkeypatch):
    """`kvplan.cli.main` builds the click command tree from the functions' signatures on every call
    (once per process for a real user); hundreds of in-process calls would spend most of their time
    there, so the suite builds it once."""
    import typer.main

    build = typer.main.get_command

    def cached(app):
        if id(app) not in _COMMANDS:
            _COMMANDS[id(app)] = build(app)
        return _COMMANDS[id(app)]

    monkeypatch.setattr(typer.main, "get_command", cached)


def pytest_terminal_summary(terminalreporter) -> None:
    if CASES:
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(CASES.items()))
        terminalreporter.write_line(f"kvplan fuzz: {sum(CASES.values()):,} generated cases ({kinds}); "
                                    "every case checked for tracebacks, exit codes and files written (failures are listed above)")
