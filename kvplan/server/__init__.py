"""`kvplan serve`: the bundled engine behind an OpenAI-compatible API with vLLM-named `/metrics`.

Modules: serve.py (start-up), asgi_app.py (routes), engine_loop.py (the engine's thread),
protocol.py (request parsing and checks), limits.py (the door's limits), connection.py and
middleware.py (HTTP connection handling), tokenizer.py and detokenizer.py, prometheus_metrics.py.
Kept import-light: `kvplan.server.tokenizer` is used by the HTTP client too; the engine, Starlette
and uvicorn load only from `kvplan.server.serve` / `kvplan.server.asgi_app`.
May import engine and below; never stress, gate, report or cli.
"""
