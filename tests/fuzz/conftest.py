"""The fuzz suite counts how many generated cases it ran (and of which kind); tests/conftest.py prints
the total at the end of the session."""
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


@pytest.fixture(autouse=True)
def _count_cases(request):
    """Each test's generated cases ride on its report (user_properties), so the count reaches the
    process that prints the summary under pytest-xdist too (tests/conftest.py adds them up)."""
    before = dict(CASES)
    yield
    delta = {k: v - before.get(k, 0) for k, v in CASES.items() if v != before.get(k, 0)}
    if delta:
        request.node.user_properties.append(("fuzz_cases", delta))
