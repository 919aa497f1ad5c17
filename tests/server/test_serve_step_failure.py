"""`kvplan serve` survives a request that makes its engine step raise: that request gets a 500 error
object (or an SSE error event), the next normal request gets 200, `/health` stays 200 and the pool
returns to 0 used blocks. The app runs in-process (uvicorn in a thread) so the model and the sampler
can be poisoned for one marker: a prompt longer than POISON_POSITION tokens makes the forward raise,
a request with seed POISON_SEED makes the sampler raise."""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from server_helpers import ThreadServer

from kvplan.engine import EngineConfig, LLMEngine, SamplingParams
from kvplan.server.asgi_app import create_app
from kvplan.server.engine_loop import MAX_CONSECUTIVE_STEP_FAILURES, EngineLoop, ErrorEvent, TokenEvent
from kvplan.server.serve import build_context

POISON_POSITION = 200  # normal prompts here are far shorter (max_model_len 256)
POISON_SEED = 4242


class PoisonedSampler:
    def __init__(self, real) -> None:
        self.real = real
        self.generator = real.generator

    def __call__(self, logits, params, generators):
        if any(p.seed == POISON_SEED for p in params):
            raise ValueError("poisoned sampling")
        return self.real(logits, params, generators)


def poisoned_engine() -> LLMEngine:
    engine = LLMEngine.from_profile("tiny-llama", EngineConfig(kv_cache_memory_bytes=4 * 2**20, max_model_len=256))

    def hook(_module, _args, kwargs):
        if int(kwargs["position_ids"].max()) >= POISON_POSITION:
            raise RuntimeError("poisoned forward")
    engine.model.register_forward_pre_hook(hook, with_kwargs=True)
    engine.runner.sampler = PoisonedSampler(engine.runner.sampler)
    return engine


@pytest.fixture(scope="module")
def poisoned_server() -> Iterator[tuple[ThreadServer, LLMEngine]]:
    engine = poisoned_engine()
    ctx = build_context(engine, "tiny-llama", "tiny")
    server = ThreadServer(create_app(ctx))
    ctx.loop.start()
    server.start()
    try:
        yield server, engine
    finally:
        server.stop()
        ctx.loop.stop()


NORMAL = {"model": "tiny", "prompt": [5, 6, 7, 8, 9], "max_tokens": 6, "temperature": 0, "ignore_eos": True}
POISONS = {"forward": {**NORMAL, "prompt": list(range(3, 3 + 220))},
           "sampler": {**NORMAL, "temperature": 0.7, "seed": POISON_SEED}}


def wait_pool_empty(engine: LLMEngine, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while engine.block_manager.num_used_blocks and time.monotonic() < deadline:
        time.sleep(0.05)
    return engine.block_manager.num_used_blocks


@pytest.mark.parametrize("where", sorted(POISONS))
def test_poisoned_request_then_normal_one(poisoned_server, where: str) -> None:
    server, engine = poisoned_server
    r = httpx.post(f"{server.url}/v1/completions", json=POISONS[where], timeout=60)
    assert r.status_code == 500, r.text
    err = r.json()["error"]
    assert err["code"] == 500
    assert ("poisoned forward" if where == "forward" else "poisoned sampling") in err["message"]
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    ok = httpx.post(f"{server.url}/v1/completions", json=NORMAL, timeout=60)
    assert ok.status_code == 200, ok.text
    assert ok.json()["usage"]["completion_tokens"] == 6
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    assert wait_pool_empty(engine) == 0


def test_poisoned_stream_gets_an_error_event(poisoned_server) -> None:
    server, engine = poisoned_server
    with httpx.stream(
        "POST", f"{server.url}/v1/completions", json={**POISONS["forward"], "stream": True}, timeout=60
    ) as r:
        assert r.status_code == 200  # the stream had started; the failure arrives as an event
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == 500
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    assert wait_pool_empty(engine) == 0


def test_innocents_sharing_the_step_are_served(poisoned_server) -> None:
    """Poisons and normal requests at once: batched together, only the poisons fail."""
    server, engine = poisoned_server
    normals = [{**NORMAL, "prompt": [5 + i, 6, 7, 8]} for i in range(6)]

    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            bodies = [normals[0], POISONS["forward"], *normals[1:4], POISONS["sampler"], *normals[4:]]
            return await asyncio.gather(*(client.post("/v1/completions", json=b) for b in bodies))

    alone = [
        httpx.post(f"{server.url}/v1/completions", json=b, timeout=60).json()["choices"][0]["text"] for b in normals
    ]
    responses = asyncio.run(go())
    statuses = [r.status_code for r in responses]
    assert statuses == [200, 500, 200, 200, 200, 500, 200, 200]
    ok = [r.json()["choices"][0]["text"] for r in responses if r.status_code == 200]
    assert ok == alone  # greedy: the same text as when each ran alone
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    assert wait_pool_empty(engine) == 0


class Broken:
    """An engine whose step raises with no request to blame (a bug in its bookkeeping, say)."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.broken = True

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def step(self):
        if self.broken:
            raise KeyError("bookkeeping")
        return self.engine.step()


def test_unblamed_step_failures_fail_open_requests_and_kill_the_loop_only_when_repeated() -> None:
    engine = Broken(
        LLMEngine.from_profile("tiny-llama", EngineConfig(kv_cache_memory_bytes=4 * 2**20, max_model_len=256))
    )
    loop = EngineLoop(engine)
    loop.start()

    async def one(i: int):
        events = loop.submit(f"r{i}", (5, 6, 7), SamplingParams(max_tokens=3, temperature=0.0), time.perf_counter())
        return await asyncio.wait_for(events.get(), 60)

    try:
        for i in range(MAX_CONSECUTIVE_STEP_FAILURES - 1):
            event = asyncio.run(one(i))
            assert isinstance(event, ErrorEvent) and event.status == 500 and "KeyError" in event.message
            assert loop.healthy and engine.block_manager.num_used_blocks == 0
        engine.broken = False  # a success resets the count
        assert isinstance(asyncio.run(one(100)), TokenEvent)
        engine.broken = True
        for i in range(MAX_CONSECUTIVE_STEP_FAILURES):
            assert isinstance(asyncio.run(one(200 + i)), ErrorEvent)
        deadline = time.monotonic() + 10
        while loop.healthy and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not loop.healthy and "KeyError" in loop.dead_reason
    finally:
        loop.stop()
