"""Helpers of the server tests: free ports, request specs, a `kvplan serve` subprocess, and a
deliberately faulty OpenAI-compatible server run by uvicorn in a thread.

The faulty server picks its behaviour from the `X-Request-Id` prefix the client sends:
  ok-      3 tokens, then usage and [DONE]
  short-   2 tokens although more were asked (a token-count mismatch, status ok)
  e500-    HTTP 500 whose body echoes the Authorization header (the client must scrub the key)
  drop-    one token, then the connection dies mid-stream (no terminating chunk)
  stall-   one token, then silence far past the client's timeout
  nodone-  one token, then a clean end of stream without [DONE]
  badjson- an event that is not JSON
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from kvplan.workload.request import Request as WorkloadRequest

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 90.0  # torch import + model build on a loaded 2-core box


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def specs(n: int, *, prompt_tokens: int = 8, output_tokens: int = 4, gap_s: float | None = 0.02,
          ids: list[str] | None = None, first_token: int = 10) -> list[WorkloadRequest]:
    """`n` requests with distinct prompts; open loop `gap_s` apart, or closed loop when None."""
    out = []
    for i in range(n):
        prompt = tuple(first_token + (i * 7 + j) % 500 for j in range(prompt_tokens))
        out.append(
            WorkloadRequest.of_ids(
                index=i,
                request_id=ids[i] if ids else f"req-{i:06d}",
                class_name="short" if i % 2 else "long",
                arrival_s=None if gap_s is None else i * gap_s,
                prompt_token_ids=prompt,
                output_tokens=output_tokens,
                shared_prefix_id=None,
                shared_prefix_tokens=0,
                is_warmup=False,
            )
        )
    return out


class ServeProcess:
    """`python -m kvplan serve ...` on a free port; always stopped by `stop()`."""

    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"kvplan-serve-{self.port}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvplan", "serve", "--host", "127.0.0.1", "--port", str(self.port), *args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_healthy(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"kvplan serve exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"kvplan serve not healthy after {timeout_s} s: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


# --- the faulty server ---------------------------------------------------------------------------
FAULTY_METRICS = """# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="faulty"} 0.25
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="faulty"} 2.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="faulty"} 7.0
# HELP vllm:cache_config_info information of cache_config
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="32",num_gpu_blocks="1234",cache_dtype="auto"} 1.0
"""


def _chunk(text: str, finish: str | None = None) -> bytes:
    obj = {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    return f"data: {json.dumps(obj)}\n\n".encode()


def _usage(n: int, prompt_tokens: int) -> bytes:
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n}
    return f"data: {json.dumps({'id': 'x', 'choices': [], 'usage': usage})}\n\n".encode()


class MidStreamDrop(Exception):
    """Raised inside a streaming body: uvicorn then closes the socket without the final chunk."""


def faulty_app(stall_s: float, seen_auth: list[str]) -> Starlette:
    async def health(_: Request) -> Response:
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        seen_auth.append(request.headers.get("authorization", ""))
        return JSONResponse({"object": "list", "data": [{"id": "faulty", "object": "model"}]})

    async def metrics(_: Request) -> Response:
        return PlainTextResponse(FAULTY_METRICS)

    async def completions(request: Request) -> Response:
        auth = request.headers.get("authorization", "")
        seen_auth.append(auth)
        kind = request.headers.get("x-request-id", "ok-").split("-", 1)[0]
        prompt = (await request.json()).get("prompt")
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        if kind == "e500":
            return PlainTextResponse(f"internal error; your header was {auth}", status_code=500)

        async def body() -> AsyncIterator[bytes]:
            yield _chunk(" a")
            if kind == "drop":
                await asyncio.sleep(0.01)
                raise MidStreamDrop("dropping the connection on purpose")
            if kind == "stall":
                await asyncio.sleep(stall_s)
            if kind == "nodone":
                return
            if kind == "badjson":
                yield b"data: {not json\n\n"
                return
            n = 2 if kind == "short" else 3
            for i in range(1, n):
                yield _chunk(" b", "length" if i == n - 1 else None)
            yield _usage(n, prompt_tokens)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[Route("/health", health), Route("/v1/models", models), Route("/metrics", metrics),
                             Route("/v1/completions", completions, methods=["POST"])])


class ThreadServer:
    """uvicorn in a daemon thread (signal handlers are installed only in the main thread)."""

    def __init__(self, app: Starlette) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="critical", lifespan="off",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self, timeout_s: float = 10.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the faulty server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
