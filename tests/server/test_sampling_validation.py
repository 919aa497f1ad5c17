"""Sampling parameters and prompt ids checked as vLLM checks them, and a request that once poisoned
`kvplan serve` (temperature 1e-40: logits / 1e-40 = inf, multinomial on nan) answered 200, after
which a normal request is 200 and `/health` is 200."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import torch
from server_helpers import ThreadServer

from kvplan.engine import EngineConfig, LLMEngine, SamplingParams
from kvplan.engine.sampler import Sampler
from kvplan.errors import KvplanError
from kvplan.server.asgi_app import create_app
from kvplan.server.protocol import ProtocolError, parse_request
from kvplan.server.serve import build_context
from kvplan.server.tokenizer import WordTokenizer

VOCAB = 1000


def _parse(body: dict[str, Any], api: str = "completions"):
    return parse_request({"prompt": [5, 6, 7], **body}, api, served_model_name="m", tokenizer=WordTokenizer(VOCAB),  # type: ignore[arg-type]
                         vocab_size=VOCAB, max_model_len=256)


@pytest.mark.parametrize(
    "body, param",
    [
        ({"stream": "false"}, "stream"),
        ({"stream": "true"}, "stream"),
        ({"stream": 1}, "stream"),
        ({"stream": 0}, "stream"),
        ({"ignore_eos": "no"}, "ignore_eos"),
        ({"stream_options": {"include_usage": "yes"}}, "include_usage"),
        ({"stream_options": ["include_usage"]}, "stream_options"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": "0.5"}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_p": float("nan")}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"top_k": 0.5}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"top_k": "5"}, "top_k"),
        ({"top_k": VOCAB + 1}, "top_k"),
        ({"min_p": -0.1}, "min_p"),
        ({"min_p": 1.1}, "min_p"),
        ({"min_p": float("nan")}, "min_p"),
        ({"prompt": [5, 5.7]}, "prompt"),
        ({"prompt": [5, True]}, "prompt"),
        ({"prompt": [5, "7"]}, "prompt"),
    ],
)
def test_bad_values_are_a_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ProtocolError) as err:
        _parse(body)
    assert err.value.status == 400
    assert err.value.param == param or param in str(err.value)


@pytest.mark.parametrize(
    "body, field, value",
    [
        ({"stream": False}, "stream", False),
        ({"stream": True}, "stream", True),
        ({"stream": None}, "stream", False),
        ({"top_k": -1}, "top_k", 0),
        ({"top_k": 0}, "top_k", 0),
        ({"top_k": VOCAB}, "top_k", VOCAB),
        ({"min_p": 1}, "min_p", 1.0),
        ({"top_p": 1e-12}, "top_p", 1e-12),
        ({"temperature": 5e-324}, "temperature", 5e-324),
        ({"stream_options": None}, "include_usage", False),
        ({"stream_options": {"include_usage": True}}, "include_usage", True),
    ],
)
def test_vllms_accepted_values(body: dict[str, Any], field: str, value: Any) -> None:
    assert getattr(_parse(body), field) == value


@pytest.mark.parametrize("kwargs", [dict(top_k=-2), dict(top_k=1.5), dict(top_k=True), dict(min_p=float("nan")),
                                    dict(min_p=1.5), dict(temperature=2.5), dict(ignore_eos="false")])
def test_sampling_params_refuse_out_of_range(kwargs: dict[str, Any]) -> None:
    with pytest.raises(KvplanError, match=next(iter(kwargs))):
        SamplingParams(**kwargs)


def test_greedy_params_drop_their_filters_as_vllm_does() -> None:
    assert SamplingParams(top_k=-1).top_k == 0
    zero = SamplingParams(temperature=0, top_k=5, top_p=0.5, min_p=0.3)
    assert zero.greedy and (zero.top_k, zero.top_p, zero.min_p) == (0, 1.0, 0.0)


@pytest.mark.parametrize("temperature", [5e-324, 1e-40, 1e-6, 0.005])
def test_a_tiny_temperature_samples_at_vllms_floor(temperature: float) -> None:
    """vLLM (sampling_params.py) raises 0 < t < 0.01 to 0.01 ("We have maxed it out to 0.01") and keeps
    the request's filters: it is sampling, not greedy."""
    tiny = SamplingParams(temperature=temperature, top_k=5, top_p=0.5, min_p=0.3)
    assert tiny.temperature == 0.01 and not tiny.greedy and (tiny.top_k, tiny.top_p, tiny.min_p) == (5, 0.5, 0.3)
    assert SamplingParams(temperature=0.01).temperature == 0.01 and SamplingParams(temperature=0.02).temperature == 0.02


def test_top_k_1_and_min_p_1_sample_the_argmax() -> None:
    """Either filter leaves only the likeliest token, whatever the generator draws."""
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(3))
    sampler = Sampler(seed=0)
    argmax = logits.argmax(dim=-1).tolist()
    for params in (SamplingParams(temperature=1.5, top_k=1), SamplingParams(temperature=1.5, min_p=1.0)):
        for _ in range(5):
            assert sampler(logits, [params] * 6, [None] * 6) == argmax
    free = {tuple(sampler(logits, [SamplingParams(temperature=1.5)] * 6, [None] * 6)) for _ in range(5)}
    assert any(row != tuple(argmax) for row in free)  # without the filters it does sample


def test_top_k_keeps_only_the_k_likeliest() -> None:
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(4))
    top3 = set(logits[0].topk(3).indices.tolist())
    sampler = Sampler(seed=0)
    drawn = {sampler(logits, [SamplingParams(temperature=2.0, top_k=3)], [None])[0] for _ in range(200)}
    assert drawn <= top3 and len(drawn) > 1


def test_engine_token_ids_must_be_integers() -> None:
    engine = LLMEngine.from_profile("tiny-llama", EngineConfig(kv_cache_memory_bytes=2**20, max_model_len=128))
    for bad in ([5, 5.7], [5, True], [5, "7"], "57", [5, np.bool_(True)]):
        with pytest.raises(KvplanError, match="integers"):
            engine.add_request(bad, SamplingParams(max_tokens=2))  # type: ignore[arg-type]
    assert engine.add_request([5, np.int64(7)], SamplingParams(max_tokens=2))  # numpy integers are integers
    assert engine.scheduler.has_unfinished()


class NeverTokenize(WordTokenizer):
    max_token_bytes = 4  # type: ignore[assignment]

    def encode(self, text: str, max_tokens: int | None = None) -> list[int]:
        raise AssertionError("tokenized a prompt its bytes already ruled out")


def test_prompt_text_is_bounded_by_bytes_before_tokenization() -> None:
    with pytest.raises(ProtocolError, match="bytes of text") as err:
        parse_request({"prompt": "é" * 600}, "completions", served_model_name="m", tokenizer=NeverTokenize(VOCAB),
                      vocab_size=VOCAB, max_model_len=256)  # 1200 bytes > 256 tokens x 4 bytes
    assert err.value.status == 400


# --- over HTTP -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    engine = LLMEngine.from_profile("tiny-llama", EngineConfig(kv_cache_memory_bytes=4 * 2**20, max_model_len=256))
    ctx = build_context(engine, "tiny-llama", "tiny")
    srv = ThreadServer(create_app(ctx))
    ctx.loop.start()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        ctx.loop.stop()


NORMAL = {"model": "tiny", "prompt": [5, 6, 7, 8, 9], "max_tokens": 6, "ignore_eos": True}


@pytest.mark.parametrize("temperature", [1e-40, 5e-324])
def test_poisonous_temperature_then_a_normal_request(server: ThreadServer, temperature: float) -> None:
    poison = httpx.post(
        f"{server.url}/v1/completions", json={**NORMAL, "temperature": temperature, "seed": 7}, timeout=60
    )
    assert poison.status_code == 200, poison.text
    floor = httpx.post(f"{server.url}/v1/completions", json={**NORMAL, "temperature": 0.01, "seed": 7}, timeout=60)
    assert floor.status_code == 200, floor.text
    assert poison.json()["choices"][0]["text"] == floor.json()["choices"][0]["text"]  # sampled at vLLM's 0.01 floor
    normal = httpx.post(
        f"{server.url}/v1/completions", json={**NORMAL, "temperature": 0.8, "top_k": 20, "min_p": 0.05}, timeout=60
    )
    assert normal.status_code == 200, normal.text
    assert normal.json()["usage"]["completion_tokens"] == 6
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200


def test_string_stream_flag_is_a_json_400(server: ThreadServer) -> None:
    r = httpx.post(f"{server.url}/v1/completions", json={**NORMAL, "stream": "false"}, timeout=60)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "stream"
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200


def test_a_huge_bad_value_is_not_echoed_whole() -> None:
    """The error names the field and shows the start of the value: one readable line, not 1 MB."""
    with pytest.raises(ProtocolError) as err:
        _parse({"temperature": "x" * 2**20})
    assert err.value.param == "temperature" and len(str(err.value)) < 200
