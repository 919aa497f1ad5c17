"""`kvplan serve`: the bundled engine behind an OpenAI-compatible API with vLLM-named `/metrics`.

Kept import-light: `kvplan.server.tokenizer` is used by the HTTP client too; the engine, Starlette
and uvicorn load only from `kvplan.server.serve` / `kvplan.server.asgi_app`.
"""
