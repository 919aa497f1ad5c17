"""The Starlette app of `kvplan serve`: OpenAI-compatible routes over an `EngineLoop`.

Routes: `POST /v1/completions`, `POST /v1/chat/completions` (streaming SSE or not), `GET /v1/models`,
`GET /health` (503 once the engine loop has died; a request whose step failed gets a 500 error
object, or an SSE error event, and the engine goes on), `GET /metrics` (Prometheus text, vLLM names).
Every error, 404 and 405 included, is OpenAI's JSON error object. With an API key, every route but
/health and /metrics needs it (kvplan.server.middleware); request limits: kvplan.server.limits.
A streaming client that goes away aborts its request in the engine, freeing its KV blocks; a
non-streaming one is noticed only when its response is written (the request runs to its end).
"""
from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from kvplan.engine.sampling_params import SamplingParams
from kvplan.errors import KvplanError
from kvplan.server.engine_loop import EngineLoop, ErrorEvent, TokenEvent, now_s
from kvplan.server.limits import MAX_JSON_DEPTH, ServeLimits
from kvplan.server.middleware import ApiKeyMiddleware, BodyLimitMiddleware, exception_handlers, json_error
from kvplan.server.prometheus_metrics import ServerMetrics
from kvplan.server.protocol import (
    Api,
    ChunkMaker,
    GenerationRequest,
    ProtocolError,
    parse_json_body,
    parse_request,
    sse,
)
from kvplan.server.tokenizer import TextTokenizer


@dataclass(frozen=True)
class ServeContext:
    loop: EngineLoop
    metrics: ServerMetrics
    tokenizer: TextTokenizer
    served_model_name: str
    model_source: str  # the --model value (profile name or path), shown as the model's `root`
    max_model_len: int
    vocab_size: int


def _error(status: int, message: str) -> JSONResponse:
    return json_error(status, message)


def _sampling_params(gen: GenerationRequest) -> SamplingParams:
    return SamplingParams(max_tokens=gen.max_tokens, temperature=gen.temperature, top_p=gen.top_p, top_k=gen.top_k,
                          min_p=gen.min_p, ignore_eos=gen.ignore_eos, seed=gen.seed, stop_token_ids=gen.stop_token_ids)


def _drain(first: TokenEvent | ErrorEvent, events) -> list[TokenEvent | ErrorEvent]:
    """`first` plus every event already queued: sent as one write, so a slow reader catches up."""
    batch = [first]
    while not events.empty():
        batch.append(events.get_nowait())
    return batch


def _middleware(limits: ServeLimits) -> list[Middleware]:
    """Outermost first: the key is checked before any body byte is read."""
    stack = [Middleware(BodyLimitMiddleware, max_bytes=limits.max_request_bytes, timeout_s=limits.body_timeout_s)]
    if limits.api_key is not None:
        stack.insert(0, Middleware(ApiKeyMiddleware, api_key=limits.api_key))
    return stack


def create_app(ctx: ServeContext, limits: ServeLimits | None = None) -> Starlette:
    limits = limits or ServeLimits()
    started_s = int(time.time())

    async def health(_: Request) -> Response:
        if not ctx.loop.healthy:
            return _error(503, ctx.loop.dead_reason or "the engine loop is not running")
        return Response(status_code=200)

    async def models(_: Request) -> Response:
        card = {"id": ctx.served_model_name, "object": "model", "created": started_s, "owned_by": "kvplan",
                "root": ctx.model_source, "parent": None, "max_model_len": ctx.max_model_len}
        return JSONResponse({"object": "list", "data": [card]})

    async def metrics(_: Request) -> Response:
        return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def stream(events, maker: ChunkMaker, gen: GenerationRequest, request_id: str) -> AsyncIterator[bytes]:
        finished = False
        completion_tokens = 0
        detok = ctx.tokenizer.detokenizer(gen.prompt_token_ids)
        try:
            if gen.api == "chat":
                yield sse(maker.role_chunk())
            while not finished:
                out: list[bytes] = []
                for event in _drain(await events.get(), events):
                    if isinstance(event, ErrorEvent):
                        finished = True
                        if event.status >= 500:  # failed after admission (a step failure), not refused
                            ctx.metrics.count_error()
                        out.append(sse(ProtocolError(event.status, event.message).body()))
                        break
                    text = detok.step(event.token_ids) + (detok.finish() if event.finished else "")
                    if text or event.finished:  # held-back bytes (half a character) wait for the next step
                        out.append(sse(maker.token_chunk(text, event.finish_reason if event.finished else None)))
                    completion_tokens = event.num_output_tokens
                    finished = event.finished
                if finished:
                    if gen.include_usage:
                        out.append(sse(maker.usage_chunk(len(gen.prompt_token_ids), completion_tokens)))
                    out.append(sse("[DONE]"))
                yield b"".join(out)
        finally:  # the client went away (cancellation) or the generator was closed early
            if not finished:
                ctx.loop.abort(request_id)

    async def collect(events, maker: ChunkMaker, gen: GenerationRequest, request_id: str) -> Response:
        finished = False
        pieces: list[str] = []
        detok = ctx.tokenizer.detokenizer(gen.prompt_token_ids)
        try:
            while not finished:
                event = await events.get()
                if isinstance(event, ErrorEvent):
                    finished = True  # the engine refused it (400) or its step failed (500): nothing left to abort
                    if event.status >= 500:
                        ctx.metrics.count_error()
                    return _error(event.status, event.message)
                pieces.append(detok.step(event.token_ids))
                finished = event.finished
            pieces.append(detok.finish())
            return JSONResponse(maker.full("".join(pieces), event.finish_reason, len(gen.prompt_token_ids),
                                           event.num_output_tokens))
        finally:
            if not finished:
                ctx.loop.abort(request_id)

    def _parse(raw: bytes, api: Api) -> GenerationRequest:
        return parse_request(parse_json_body(raw, MAX_JSON_DEPTH), api, served_model_name=ctx.served_model_name,
                             tokenizer=ctx.tokenizer, vocab_size=ctx.vocab_size, max_model_len=ctx.max_model_len)

    async def generate(request: Request, api: Api) -> Response:
        if not ctx.loop.healthy:
            return _error(503, ctx.loop.dead_reason or "the engine loop is not running")
        arrival_s = now_s()
        try:
            # parsing and tokenizing a multi-megabyte prompt takes a while: off the event loop, so
            # every other stream keeps flowing meanwhile
            gen = await run_in_threadpool(_parse, await request.body(), api)
            params = _sampling_params(gen)
        except ProtocolError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        except KvplanError as exc:  # SamplingParams' own validation
            return _error(400, str(exc))
        request_id = f"{'chatcmpl' if api == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
        events = ctx.loop.submit(request_id, gen.prompt_token_ids, params, arrival_s)
        ctx.metrics.observe_request_params(gen.max_tokens)
        maker = ChunkMaker.new(api, request_id, ctx.served_model_name)
        if gen.stream:
            return StreamingResponse(stream(events, maker, gen, request_id), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await collect(events, maker, gen, request_id)

    async def completions(request: Request) -> Response:
        return await generate(request, "completions")

    async def chat(request: Request) -> Response:
        return await generate(request, "chat")

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        ctx.loop.stop()

    return Starlette(routes=[
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
    ], middleware=_middleware(limits), exception_handlers=exception_handlers(), lifespan=lifespan)
