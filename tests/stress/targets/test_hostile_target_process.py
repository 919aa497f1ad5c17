"""The issue-29 acceptance run as written, end to end: `kvplan stress --target` against a server
whose every answer is hostile (tokens without end, a byte at a time, an SSE line without end, and
/health and /metrics bodies without end), in a child process under a 3 GiB address-space limit.
It ends on time with exit 1 (failed requests), no traceback, and a result that records them."""
from __future__ import annotations

import asyncio
import itertools
import json
import resource
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from server_helpers import ThreadServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

ADDRESS_SPACE_BYTES = 3 * 2**30
TIMEOUT_S = 0.5
SCENARIO = """name: hostile
model: tiny-llama
engine: {max_model_len: 256, kv_cache_dtype: float32, kv_cache_memory_bytes: 4194304, num_threads: 1}
workload:
  classes:
    - {name: short, prompt_tokens: {dist: fixed, mean: 16}, output_tokens: {dist: fixed, mean: 4}}
arrival: {type: concurrency, concurrency: 6}
num_requests: 6
seed: 1
"""


async def _endless(piece: bytes, pause_s: float = 0.0) -> AsyncIterator[bytes]:
    while True:
        yield piece
        await asyncio.sleep(pause_s)


def _app() -> Starlette:
    token = f"data: {json.dumps({'choices': [{'index': 0, 'text': ' a', 'finish_reason': None}]})}\n\n".encode()
    kinds = itertools.cycle(["forever", "drip", "noline"])

    async def completions(_: Request) -> Response:
        kind = next(kinds)
        piece, pause = {
            "forever": (token, 0.001),
            "drip": (b"d", TIMEOUT_S / 3),
            "noline": (b"data: " + b"a" * 65536, 0.0),
        }[kind]
        return StreamingResponse(_endless(piece, pause), media_type="text/event-stream")

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def endless(_: Request) -> Response:  # /health answers 200 at once, then its body never ends
        return StreamingResponse(_endless(b"x" * 65536))

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]), Route("/v1/models", models),
                             Route("/metrics", endless)])


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


def test_a_hostile_target_run_ends_bounded_under_3_gib(tmp_path: Path) -> None:
    server = ThreadServer(_app())
    server.start()
    try:
        scenario = tmp_path / "hostile.yaml"
        scenario.write_text(SCENARIO)
        out = tmp_path / "run"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvplan",
                "stress",
                "--scenario",
                str(scenario),
                "--target",
                server.url,
                "--server-kind",
                "openai",
                "--timeout-s",
                str(TIMEOUT_S),
                "--out",
                str(out),
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=_limit,
        )
    finally:
        server.stop()
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr and "MemoryError" not in done.stderr
    result = json.loads((out / "result.json").read_text())
    errors = " ".join(result["errors"])
    assert result["metrics"]["failed"] == 6 and "SSE line longer" in errors and "more than" in errors
