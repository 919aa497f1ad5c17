"""Build the engine and serve it: the body of `kvplan serve`."""
from __future__ import annotations

import sys

from kvplan.engine import EngineConfig, LLMEngine
from kvplan.server.asgi_app import ServeContext, create_app
from kvplan.server.connection import guarded_protocol
from kvplan.server.engine_loop import EngineLoop
from kvplan.server.limits import MAX_HEADER_BYTES, ServeLimits, exposure_warning, raise_open_file_limit
from kvplan.server.prometheus_metrics import CacheConfigInfo, ServerMetrics
from kvplan.server.tokenizer import load_tokenizer


def build_context(engine: LLMEngine, model: str, served_model_name: str | None) -> ServeContext:
    name = served_model_name or model
    cfg = engine.config
    cache = CacheConfigInfo(
        num_gpu_blocks=engine.num_gpu_blocks,
        block_size=cfg.block_size,
        cache_dtype=engine.kv_cache_dtype,
        enable_prefix_caching=cfg.enable_prefix_caching,
        gpu_memory_utilization=cfg.gpu_memory_utilization,
        kv_cache_memory_bytes=engine.kv_cache_bytes,
        max_model_len=engine.max_model_len,
    )
    metrics = ServerMetrics(name, cache)
    loop = EngineLoop(engine, metrics)
    return ServeContext(loop=loop, metrics=metrics, tokenizer=load_tokenizer(model, engine.vocab_size),
                        served_model_name=name, model_source=model, max_model_len=engine.max_model_len,
                        vocab_size=engine.vocab_size)


def check_bindable(host: str, port: int) -> None:
    """One line, before anything is printed or loaded, when `host:port` cannot be served: an address
    that does not resolve or is not this machine's, or a port in use."""
    import socket

    from kvplan.errors import KvplanError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise KvplanError(
            f"--host {host!r} does not resolve to an address ({exc}); e.g. 127.0.0.1 or 0.0.0.0"
        ) from None
    family, kind, proto, _, addr = infos[0]
    try:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            sock.bind(addr)
    except OSError as exc:
        raise KvplanError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None


def _log_config(access_log: bool) -> dict:
    """uvicorn's logging, quiet but for one access line per request (as `vllm serve` logs them)."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    cfg = copy.deepcopy(LOGGING_CONFIG)
    cfg["loggers"]["uvicorn.error"]["level"] = "WARNING"
    cfg["loggers"]["uvicorn.access"]["level"] = "INFO" if access_log else "WARNING"
    return cfg


def _startup_warnings(host: str, limits: ServeLimits) -> None:
    """Before the engine build, so the lines show even when that fails; they never show the key."""
    for line in (exposure_warning(host, limits), raise_open_file_limit(limits.max_connections)):
        if line:
            print(line, file=sys.stderr, flush=True)


def serve(model: str, config: EngineConfig, *, host: str, port: int, served_model_name: str | None = None,
          seed: int = 0, access_log: bool = True, limits: ServeLimits | None = None) -> None:
    """Blocks until interrupted (Ctrl-C / SIGTERM): uvicorn then stops the engine loop via the lifespan."""
    import prometheus_client
    import uvicorn

    limits = limits or ServeLimits()
    check_bindable(host, port)  # before loading the model or saying "serving on"
    _startup_warnings(host, limits)
    # no `_created` series: vLLM's /metrics has none either; this process only serves
    prometheus_client.disable_created_metrics()
    engine = LLMEngine.from_model(model, config, seed=seed)  # unknown names raise a one-line error
    ctx = build_context(engine, model, served_model_name)
    ctx.loop.start()
    print(f"kvplan: serving {ctx.served_model_name!r} on http://{host}:{port} (num_gpu_blocks={engine.num_gpu_blocks}, "
          f"block_size={config.block_size}, max_model_len={engine.max_model_len}, tokenizer={ctx.tokenizer.name}, "
          f"auth={'api-key' if limits.api_key is not None else 'none'})",
          file=sys.stderr, flush=True)
    # --no-access-log for load tests: at thousands of requests a second the line costs more than the request.
    # http=: uvicorn's h11 protocol plus a header deadline and a connection cap (kvplan.server.connection);
    # not uvicorn's limit_concurrency, which half-open connections fill (then everyone else gets 503).
    uvicorn.run(create_app(ctx, limits), host=host, port=port, log_config=_log_config(access_log), log_level=None,
                access_log=access_log, timeout_graceful_shutdown=2, backlog=4096, http=guarded_protocol(limits),
                ws="none", h11_max_incomplete_event_size=MAX_HEADER_BYTES)
