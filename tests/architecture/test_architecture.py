"""Architecture checks: import layers, no import cycles, short functions, and no torch where none is needed.

Layers, lowest first: errors | units < files | validation < spec < plan < engine < server; stress
sits beside server (engine and below; not server, report or cli); report is above stress (stress and
below, but not engine, server or cli); cli and __main__ on top. The contracts live in pyproject.toml
([tool.importlinter]); `lint-imports` from the repo root checks them alone.

Only kvplan.engine, kvplan.server, kvplan.stress.targets and kvplan.workload.datasets.text (a dataset's
tokenizer) may import torch or transformers
directly; the commands that never build an engine (estimate, sweep, report, gate, stress --target)
must run in a Python where torch and transformers cannot be imported at all.

The import graph is grimp's: every import statement, including those inside functions and under
`if TYPE_CHECKING:` (imports made by `importlib.import_module` are invisible to it).
"""
from __future__ import annotations

import ast
import graphlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "kvplan"
SMOKE = ROOT / "scenarios" / "ci-smoke.yaml"
SMOKE_BASELINE = ROOT / "kvplan" / "data" / "baselines" / "ci-smoke.json"

HEAVY = ("torch", "transformers")
# packages whose modules may import torch / transformers directly (the package and all below it)
HEAVY_ALLOWED = ("kvplan.engine", "kvplan.server", "kvplan.stress.targets", "kvplan.workload.datasets.text")

MAX_FUNCTION_LINES = 60
LONG_FUNCTION_EXEMPT = {("kvplan/server/asgi_app.py", "create_app")}  # the server's route table

SUBPROCESS_TIMEOUT_S = 60


# --- helpers -------------------------------------------------------------------------------------
def _in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _base_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python: offline, and this checkout's kvplan first on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSTARTUP", "PYTHONINSPECT")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               NO_COLOR="1", COLUMNS="200")
    env.update(extra)
    return env


def _with_pythonpath(env: dict[str, str], *dirs: Path) -> dict[str, str]:
    parts = [str(d) for d in dirs] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    return {**env, "PYTHONPATH": os.pathsep.join(parts)}


def _tail(text: str, n: int = 4000) -> str:
    return text if len(text) <= n else "...\n" + text[-n:]


# --- 1. import-linter ----------------------------------------------------------------------------
def test_import_linter_contracts_kept() -> None:
    """`lint-imports` against pyproject.toml: the layers and the forbidden imports."""
    pytest.importorskip("importlinter", reason="import-linter is not installed (pip install -e '.[dev]')")
    runner = ("import sys; from importlinter.cli import lint_imports_command; "
              "sys.argv[0] = 'lint-imports'; sys.exit(lint_imports_command())")
    proc = subprocess.run([sys.executable, "-c", runner, "--no-cache", str(ROOT / "pyproject.toml")],
                          cwd=ROOT, env=_with_pythonpath(_base_env(), ROOT), capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT_S)
    report = "\n".join(line for line in proc.stdout.splitlines() if not set(line) & set("╔╚║╣╠▶◀"))  # no logo
    rc = proc.returncode  # (a bare int: pytest's assertion rewriting would print the whole CompletedProcess)
    assert rc == 0, (
        f"import-linter found broken import contracts (exit {rc}); run `lint-imports` from the repo "
        f"root to see them:\n{_tail(report, 12000)}\n{_tail(proc.stderr)}")


# --- 2. the import graph: torch only where allowed, and no cycles ---------------------------------
@pytest.fixture(scope="module")
def graph():
    grimp = pytest.importorskip("grimp", reason="grimp (installed with import-linter) is not installed")
    spec = importlib.util.find_spec("kvplan")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).resolve().parent == PKG, f"kvplan resolves to {spec.origin}, not this checkout's {PKG}"
    return grimp.build_graph("kvplan", include_external_packages=True, cache_dir=None)


def _kvplan_modules(graph) -> list[str]:
    return sorted(m for m in graph.modules if _in_package(m, "kvplan"))


def _internal_edges(graph) -> dict[str, set[str]]:
    """Module -> kvplan modules it imports directly (a package's `__init__` is its own node)."""
    mods = _kvplan_modules(graph)
    return {m: {i for i in graph.find_modules_directly_imported_by(m) if _in_package(i, "kvplan") and i != m}
            for m in mods}


def _lines(graph, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    return ", ".join(f"l.{d['line_number']}: {d['line_contents'].strip()}" for d in details) or "?"


def test_torch_and_transformers_imported_only_by_engine_server_and_stress_targets(graph) -> None:
    offenders = []
    for module in _kvplan_modules(graph):
        if any(_in_package(module, allowed) for allowed in HEAVY_ALLOWED):
            continue
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported.split(".")[0] in HEAVY:
                offenders.append(f"  {module} imports {imported} ({_lines(graph, module, imported)})")
    assert not offenders, (
        f"only {', '.join(HEAVY_ALLOWED)} may import torch/transformers directly (even inside a function); "
        f"import them lazily through those instead:\n" + "\n".join(offenders))


def _package_of(module: str) -> str:
    """kvplan.stress.targets.http1 -> kvplan.stress; kvplan.cli -> kvplan.cli; kvplan -> kvplan."""
    return ".".join(module.split(".")[:2])


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one node (each is a knot of cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _cycle_in(nodes: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One cycle through a strongly connected component, as graphlib reports it (first node repeated)."""
    inside = set(nodes)
    sorter = graphlib.TopologicalSorter({n: sorted(edges.get(n, set()) & inside) for n in nodes})
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    raise AssertionError(f"no cycle found in {nodes}")  # pragma: no cover - a component always has one


def _cycle_report(edges: dict[str, set[str]], describe_edge) -> str:
    """'' when acyclic (graphlib decides); else every knot of cycles with one cycle spelled out."""
    try:
        graphlib.TopologicalSorter({n: sorted(d) for n, d in edges.items()}).prepare()
        return ""
    except graphlib.CycleError:
        pass
    blocks = []
    for comp in _strongly_connected(edges):
        cycle = _cycle_in(comp, edges)
        # graphlib's cycle runs against the import direction (a node, then one that it imports...
        # reversed); spell it importer -> imported
        if not all(b in edges.get(a, set()) for a, b in zip(cycle, cycle[1:])):
            cycle = cycle[::-1]
        steps = "\n".join(f"      {a} -> {b}  {describe_edge(a, b)}" for a, b in zip(cycle, cycle[1:]))
        blocks.append(f"  {len(comp)} in a knot: {', '.join(comp)}\n    e.g. {' -> '.join(cycle)}\n{steps}")
    return "\n".join(blocks)


def test_no_cycle_between_kvplan_packages(graph) -> None:
    module_edges = _internal_edges(graph)
    edges: dict[str, set[str]] = {}
    witnesses: dict[tuple[str, str], list[str]] = {}
    for importer, imported in ((a, b) for a, bs in module_edges.items() for b in bs):
        pa, pb = _package_of(importer), _package_of(imported)
        edges.setdefault(pa, set())
        edges.setdefault(pb, set())
        if pa != pb:
            edges[pa].add(pb)
            witnesses.setdefault((pa, pb), []).append(f"{importer} -> {imported} ({_lines(graph, importer, imported)})")

    def describe(a: str, b: str) -> str:
        w = sorted(witnesses[(a, b)])
        return "by " + "; ".join(w[:3]) + (f"; and {len(w) - 3} more" if len(w) > 3 else "")

    report = _cycle_report(edges, describe)
    assert not report, (
        "import cycles between kvplan's packages (kvplan.spec, .plan, .engine, .server, .stress, .report each one "
        "node with all their modules; cli, errors, units, files, validation, __main__ and the root "
        "__init__ one node each):\n"
    ) + report


def test_no_cycle_between_kvplan_modules(graph) -> None:
    edges = _internal_edges(graph)
    report = _cycle_report(edges, lambda a, b: f"({_lines(graph, a, b)})")
    assert not report, "import cycles between kvplan modules (a package __init__ is its own node):\n" + report


# --- 3. short functions --------------------------------------------------------------------------
def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every function and method, nested ones included."""
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from walk(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def test_functions_are_at_most_60_lines() -> None:
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for qualname, node in _functions(tree):
            # the body, docstring included (a command's signature of typed options is not logic)
            length = node.end_lineno - node.body[0].lineno + 1
            if length > MAX_FUNCTION_LINES and (rel, qualname) not in LONG_FUNCTION_EXEMPT:
                offenders.append((length, f"  {rel}:{node.lineno} {qualname}: {length} lines"))
    offenders.sort(key=lambda o: -o[0])
    assert not offenders, (
        f"{len(offenders)} functions longer than {MAX_FUNCTION_LINES} lines (body, docstring included; "
        f"only create_app in kvplan/server/asgi_app.py is exempt):\n" + "\n".join(o[1] for o in offenders)
    )


# --- 4. commands that run without torch ----------------------------------------------------------
BLOCK_MARKER = "is not importable here (tests/architecture/test_architecture.py)"
SITECUSTOMIZE = textwrap.dedent(f'''
    """Makes torch and transformers unimportable (tests/architecture/test_architecture.py); logs each attempt."""
    import os
    import sys
    import traceback

    _BLOCKED = {HEAVY!r}


    class _HeavyBlocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] not in _BLOCKED:
                return None
            log = os.environ.get("KVPLAN_BLOCKED_IMPORT_LOG")
            if log:
                with open(log, "a", encoding="utf-8") as fh:
                    stack = [f for f in traceback.format_stack()[:-1] if "<frozen importlib" not in f]
                    fh.write("=== import " + name + " attempted from:\\n" + "".join(stack))
            raise ImportError(name + " {BLOCK_MARKER}", name=name)

        def invalidate_caches(self):
            pass


    sys.meta_path.insert(0, _HeavyBlocker())
''')


@pytest.fixture(scope="module")
def torchless_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("torchless")
    (d / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    return d


def _run_torchless(torchless_dir: Path, log: Path, *args: str, timeout_s: float = SUBPROCESS_TIMEOUT_S
                   ) -> subprocess.CompletedProcess[str]:
    env = _with_pythonpath(_base_env(KVPLAN_BLOCKED_IMPORT_LOG=str(log)), torchless_dir, ROOT)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def _assert_ran_without_torch(proc: subprocess.CompletedProcess[str], log: Path, what: str) -> None:
    attempts = log.read_text(encoding="utf-8") if log.exists() else ""
    rc = proc.returncode
    assert rc == 0, (
        f"`{what}` failed (exit {rc}) where torch and transformers cannot be imported\n"
        f"--- stderr:\n{_tail(proc.stderr)}\n--- stdout:\n{_tail(proc.stdout, 1500)}\n"
        f"--- attempted imports of {'/'.join(HEAVY)}:\n{_tail(attempts, 6000) or '(none)'}")
    bad = [line for line in proc.stderr.splitlines()
           if BLOCK_MARKER in line or any(f"No module named '{h}" in line for h in HEAVY)]
    assert not bad, f"`{what}` hit a torch/transformers ImportError (exit 0 anyway):\n" + "\n".join(bad)
    assert not attempts, (f"`{what}` tried to import torch/transformers (caught the ImportError, so it would import "
                          f"them when installed); the attempts and where they came from:\n{_tail(attempts, 6000)}")


def test_torch_blocker_works(torchless_dir: Path, tmp_path: Path) -> None:
    """The premise of the tests below: in their child Pythons `import torch` really fails."""
    log = tmp_path / "blocked.log"
    for name in HEAVY:
        proc = _run_torchless(torchless_dir, log, "-c", f"import {name}")
        assert proc.returncode != 0 and BLOCK_MARKER in proc.stderr, (name, proc.returncode, proc.stderr[-2000:])
    assert "=== import torch" in log.read_text()


def test_estimate_without_torch(torchless_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "blocked.log"
    args = ("estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8", "--json")
    proc = _run_torchless(torchless_dir, log, "-m", "kvplan", *args)
    _assert_ran_without_torch(proc, log, "kvplan " + " ".join(args))
    assert json.loads(proc.stdout)["concurrency"] == 8


def test_predict_without_torch(torchless_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "blocked.log"
    args = ("predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--num-prompts", "20", "--json")
    proc = _run_torchless(torchless_dir, log, "-m", "kvplan", *args)
    _assert_ran_without_torch(proc, log, "kvplan " + " ".join(args))
    assert json.loads(proc.stdout)["completed"] == 20


def test_plan_without_torch(torchless_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "blocked.log"
    args = ("plan", "--model", "llama-3.1-8b-instruct", "--request-rate", "2", "--slo-ttft-ms", "2000",
            "--slo-tpot-ms", "100", "--gpus", "h100", "--kv-cache-dtypes", "auto", "--json")
    proc = _run_torchless(torchless_dir, log, "-m", "kvplan", *args)
    _assert_ran_without_torch(proc, log, "kvplan " + " ".join(args))
    assert json.loads(proc.stdout)["configs"]


def test_sweep_without_torch(torchless_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "blocked.log"
    csv, png = tmp_path / "sweep.csv", tmp_path / "sweep.png"
    args = ("sweep", "--model", "llama-2-7b", "--csv", str(csv), "--plot", str(png))
    proc = _run_torchless(torchless_dir, log, "-m", "kvplan", *args)
    _assert_ran_without_torch(proc, log, "kvplan " + " ".join(args))
    assert csv.stat().st_size > 0 and png.stat().st_size > 0


def test_report_without_torch(torchless_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "blocked.log"
    out = tmp_path / "report.html"
    args = ("report", str(SMOKE_BASELINE), "-o", str(out))
    proc = _run_torchless(torchless_dir, log, "-m", "kvplan", *args)
    _assert_ran_without_torch(proc, log, "kvplan " + " ".join(args))
    assert out.stat().st_size > 0


def test_gate_without_torch(torchless_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "blocked.log"
    args = ("gate", "--baseline", str(SMOKE_BASELINE), "--result", str(SMOKE_BASELINE))
    proc = _run_torchless(torchless_dir, log, "-m", "kvplan", *args)
    _assert_ran_without_torch(proc, log, "kvplan " + " ".join(args))


def _vllm_metrics(num_gpu_blocks: int, block_size: int) -> str:
    return (
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{model_name="fake"} 0.25\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="fake"} 1.0\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="fake"} 0.0\n'
        "# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{model_name="fake"} 0.0\n'
        "# TYPE vllm:cache_config_info gauge\n"
        f'vllm:cache_config_info{{block_size="{block_size}",num_gpu_blocks="{num_gpu_blocks}",cache_dtype="auto"}} '
        '1.0\n'
    )


def well_behaved_app(num_gpu_blocks: int, block_size: int):
    """A minimal OpenAI-compatible completions server: streams exactly `max_tokens` tokens, then
    usage and [DONE], whatever the X-Request-Id (tests/server's faulty_app answers kvplan's `req-`
    ids with 3 tokens, a token-count mismatch)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.routing import Route

    def event(obj: dict) -> bytes:
        return f"data: {json.dumps(obj)}\n\n".encode()

    async def health(_: Request) -> Response:
        return Response(status_code=200)

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def metrics(_: Request) -> Response:
        return PlainTextResponse(_vllm_metrics(num_gpu_blocks, block_size))

    async def completions(request: Request) -> Response:
        body = await request.json()
        n, prompt = int(body.get("max_tokens") or 16), body.get("prompt") or []

        async def stream():
            for i in range(n):
                choice = {"index": 0, "text": " t", "finish_reason": "length" if i == n - 1 else None}
                yield event({"id": "cmpl-fake", "object": "text_completion", "choices": [choice]})
            usage = {"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": len(prompt) + n}
            yield event({"id": "cmpl-fake", "object": "text_completion", "choices": [], "usage": usage})
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/health", health), Route("/v1/models", models), Route("/metrics", metrics),
                             Route("/v1/completions", completions, methods=["POST"])])


@pytest.fixture()
def fake_openai_server() -> Iterator[str]:
    helpers = str(ROOT / "tests" / "server")
    if helpers not in sys.path:
        sys.path.insert(0, helpers)
    from server_helpers import ThreadServer  # tests/server: uvicorn in a daemon thread on a free port

    from kvplan.stress.scenario_loader import load_scenario

    scenario = load_scenario(SMOKE)  # /metrics reports the pool the scenario asks for
    server = ThreadServer(well_behaved_app(scenario.num_gpu_blocks(), scenario.engine.block_size))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def test_stress_http_target_without_torch(torchless_dir: Path, tmp_path: Path, fake_openai_server: str) -> None:
    log = tmp_path / "blocked.log"
    out = tmp_path / "stress"
    args = ("stress", "--scenario", str(SMOKE), "--target", fake_openai_server, "--out", str(out), "--no-progress",
            "--timeout-s", "20")
    proc = _run_torchless(torchless_dir, log, "-m", "kvplan", *args)
    _assert_ran_without_torch(proc, log, "kvplan " + " ".join(args))
    result = json.loads((out / "result.json").read_text())
    assert result["metrics"]["failed"] == 0, f"requests failed against the fake server: {result['metrics']}"


LIGHT_IMPORT_SPY = textwrap.dedent("""
    import importlib, json, sys, traceback
    first = {{}}
    class Spy:
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top in {heavy!r} and top not in first:
                first[top] = "".join(f for f in traceback.format_stack()[:-1] if "<frozen importlib" not in f)
    sys.meta_path.insert(0, Spy())
    importlib.import_module({module!r})
    print(json.dumps(first))
""")


@pytest.mark.parametrize("module", ["kvplan.engine.config", "kvplan.engine", "kvplan.cli"])
def test_light_import_leaves_torch_out(module: str) -> None:
    """Importing the engine's configuration (or the lazy engine package, or the CLI) loads no torch."""
    code = LIGHT_IMPORT_SPY.format(heavy=HEAVY, module=module)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_with_pythonpath(_base_env(), ROOT),
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert proc.returncode == 0, f"`import {module}` failed:\n{_tail(proc.stderr)}"
    first = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not first, f"`import {module}` imported {', '.join(first)} (it must stay light); first imported from:\n" + (
        "\n".join(f"--- {name}:\n{_tail(stack, 4000)}" for name, stack in first.items()))
