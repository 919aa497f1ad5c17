"""Request parsing: unsupported parameters named, vLLM's context-length messages, and long prompts
refused before the expensive part of tokenizing them."""
from __future__ import annotations

import pytest

from kvplan.server.protocol import ProtocolError, parse_request, unsupported_parameters
from kvplan.server.tokenizer import WordTokenizer

MAX_MODEL_LEN = 256


def _parse(body: dict, api: str = "completions"):
    return parse_request(body, api, served_model_name="m", tokenizer=WordTokenizer(1000), vocab_size=1000,  # type: ignore[arg-type]
                         max_model_len=MAX_MODEL_LEN)


@pytest.mark.parametrize(
    "body, api, named",
    [
        ({"n": 3}, "completions", ["n"]),
        ({"best_of": 2}, "completions", ["best_of"]),
        ({"echo": True}, "completions", ["echo"]),
        ({"logprobs": 0}, "completions", ["logprobs"]),
        ({"logprobs": True, "top_logprobs": 2}, "chat", ["logprobs", "top_logprobs"]),
        ({"suffix": "x"}, "completions", ["suffix"]),
        ({"prompt_logprobs": 1}, "completions", ["prompt_logprobs"]),
        ({"n": 1, "best_of": 1, "echo": False, "logprobs": None}, "completions", []),  # defaults pass
        ({"logprobs": False}, "chat", []),
        (
            {"stop": ["\n\n"], "presence_penalty": 0.5, "repetition_penalty": 1.1},
            "chat",
            ["stop", "presence_penalty", "repetition_penalty"],
        ),
        ({"stop": "END", "logit_bias": {"50256": -100}}, "completions", ["stop", "logit_bias"]),
        (
            {"response_format": {"type": "json_object"}, "tools": [{"type": "function"}]},
            "chat",
            ["tools", "response_format"],
        ),
        ({"min_tokens": 8}, "completions", ["min_tokens"]),
        ({"min_tokens": 8, "ignore_eos": True}, "completions", []),
        (
            {
                "stop": None,
                "presence_penalty": 0,
                "frequency_penalty": 0.0,
                "repetition_penalty": 1.0,
                "logit_bias": {},
                "response_format": {"type": "text"},
                "tools": [],
                "stop_token_ids": [2],
            },
            "chat",
            [],
        ),  # no-op values pass
        ({"frequency_penalty": False}, "chat", ["frequency_penalty"]),  # JSON's false is not the number 0
    ],
)
def test_unsupported_parameters(body: dict, api: str, named: list[str]) -> None:
    assert unsupported_parameters(body, api) == named  # type: ignore[arg-type]


@pytest.mark.parametrize("prompt", ["hello " * 1_000_000, list(range(5, 505)) * 2000])
def test_a_huge_prompt_is_counted_not_tokenized(prompt) -> None:
    """A million words (or ids): refused with vLLM's message and the full count."""
    with pytest.raises(ProtocolError) as err:
        _parse({"prompt": prompt})
    assert err.value.status == 400
    assert str(err.value) == (f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, your request "
                              "has 1000000 input tokens. Please reduce the length of the input messages.")


def test_prompt_filling_the_context_and_max_tokens_past_it() -> None:
    with pytest.raises(ProtocolError, match=f"your request has {MAX_MODEL_LEN} input tokens"):
        _parse({"prompt": list(range(10, 10 + MAX_MODEL_LEN))})
    with pytest.raises(ProtocolError) as err:
        _parse({"prompt": [5] * 200, "max_tokens": 100})
    assert str(err.value) == ("'max_tokens' or 'max_completion_tokens' is too large: 100. This model's maximum context "
                              "length is 256 tokens and your request has 200 input tokens (100 > 256 - 200).")
