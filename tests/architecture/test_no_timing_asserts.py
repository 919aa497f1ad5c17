"""No test asserts how fast something ran (that is benchmarks/' job): an `assert` whose expression
reads a clock is a wall-clock assert, allowed only as a lower bound (a deadline that must not fire
early, which a loaded machine can only make later). A bound on how long something may take is a
`@pytest.mark.timeout`. Tests also never write into the source tree: they write under tmp_path."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
CLOCKS = ("time.monotonic()", "time.perf_counter()", "time.time()", "elapsed", "started")


def clock_upper_bounds(source: str) -> list[str]:
    """`assert` statements comparing a clock reading with `<` / `<=` (an upper bound on time)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare):
            text = ast.unparse(node.test)
            reads_clock = any(c in text for c in CLOCKS)
            upper = any(isinstance(op, (ast.Lt, ast.LtE)) for op in node.test.ops)
            if reads_clock and upper:
                out.append(" ".join(text.split()))
    return out


def test_no_test_asserts_an_upper_bound_on_wall_clock_time() -> None:
    hits = [f"{p.relative_to(TESTS)}: {a}" for p in sorted(TESTS.rglob("*.py"))
            for a in clock_upper_bounds(p.read_text())]
    assert not hits, "wall-clock upper bounds in tests (use @pytest.mark.timeout, or move it to benchmarks/):\n" + \
        "\n".join(hits)


def test_the_finder_sees_one() -> None:
    assert clock_upper_bounds("assert time.monotonic() - started < 30\n") == ["time.monotonic() - started < 30"]
    assert clock_upper_bounds("assert time.monotonic() - started >= 0.9\n") == []
