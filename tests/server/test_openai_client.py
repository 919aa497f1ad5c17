"""The official `openai` client against `kvplan serve --model DIR`, DIR a tiny local model whose
tokenizer has a chat template: chat and completions, streaming and not, and the text re-tokenized
the way AIPerf counts output tokens."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from model_dir import build_model_dir
from server_helpers import ServeProcess

MAX_MODEL_LEN = 128
OUTPUT_TOKENS = 24
IGNORE_EOS = {"ignore_eos": True}  # what AIPerf and vLLM's benchmark send for exact lengths


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("tiny-chat-model"))


@pytest.fixture(scope="module")
def served(model_dir: Path) -> Iterator[ServeProcess]:
    server = ServeProcess("--model", str(model_dir), "--served-model-name", "tiny-chat", "--max-model-len",
                          str(MAX_MODEL_LEN), "--kv-cache-memory-bytes", str(2**20), "--no-access-log")
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(served: ServeProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)


def _aiperf_count(tokenizer, text: str) -> int:
    """AIPerf's output token count: the response text tokenized again, no special tokens added."""
    return len(tokenizer.encode(text, add_special_tokens=False))


MESSAGES = [{"role": "system", "content": "the model"}, {"role": "user", "content": "hello café 日本語 привет"}]


def test_chat_applies_the_template(client: openai.OpenAI, tokenizer) -> None:
    out = client.chat.completions.create(model="tiny-chat", messages=MESSAGES, max_tokens=OUTPUT_TOKENS, temperature=0,
                                         extra_body=IGNORE_EOS)
    rendered = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert out.usage.prompt_tokens == len(tokenizer.encode(rendered, add_special_tokens=False))
    assert out.usage.completion_tokens == OUTPUT_TOKENS and out.choices[0].finish_reason == "length"
    assert _aiperf_count(tokenizer, out.choices[0].message.content) == OUTPUT_TOKENS


def test_chat_streaming(client: openai.OpenAI, tokenizer) -> None:
    stream = client.chat.completions.create(
        model="tiny-chat",
        messages=MESSAGES,
        max_tokens=OUTPUT_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=IGNORE_EOS,
    )
    pieces, usage = [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
    text = "".join(pieces)
    assert usage is not None and usage.completion_tokens == OUTPUT_TOKENS
    assert "\ufffd" not in text
    assert _aiperf_count(tokenizer, text) == OUTPUT_TOKENS
    full = client.chat.completions.create(model="tiny-chat", messages=MESSAGES, max_tokens=OUTPUT_TOKENS, temperature=0,
                                          extra_body=IGNORE_EOS)
    assert text == full.choices[0].message.content  # greedy: the same text streamed or not


@pytest.mark.parametrize("prompt", ["hello naïve 東京", [7, 8, 9]])
def test_completions_streaming_and_not(client: openai.OpenAI, tokenizer, prompt) -> None:
    full = client.completions.create(model="tiny-chat", prompt=prompt, max_tokens=OUTPUT_TOKENS, temperature=0,
                                     extra_body=IGNORE_EOS)
    assert full.usage.completion_tokens == OUTPUT_TOKENS
    stream = client.completions.create(model="tiny-chat", prompt=prompt, max_tokens=OUTPUT_TOKENS, temperature=0,
                                       stream=True, stream_options={"include_usage": True}, extra_body=IGNORE_EOS)
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text
    assert _aiperf_count(tokenizer, text) == OUTPUT_TOKENS
    assert chunks[-1].usage.completion_tokens == OUTPUT_TOKENS


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"n": 2}, "n"),
        ({"echo": True}, "echo"),
        ({"logprobs": 1}, "logprobs"),
        ({"best_of": 2}, "best_of"),
        ({"echo": True, "logprobs": 2}, "echo, logprobs"),
        ({"stop": ["\n"]}, "stop"),
        ({"frequency_penalty": 0.3}, "frequency_penalty"),
    ],
)
def test_unsupported_parameters_are_refused(client: openai.OpenAI, kwargs: dict, named: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="tiny-chat", prompt="hello", max_tokens=2, **kwargs)
    assert f"unsupported parameters: {named}" in str(err.value)


def test_chat_logprobs_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="logprobs"):
        client.chat.completions.create(model="tiny-chat", messages=MESSAGES, max_tokens=2, logprobs=True)


def test_too_long_prompt_gets_vllms_message(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="tiny-chat", prompt="hello " * MAX_MODEL_LEN, max_tokens=2)
    assert (f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, your request has "
            f"{MAX_MODEL_LEN} input tokens. Please reduce the length of the input messages.") in str(err.value)
    with pytest.raises(openai.BadRequestError, match="'max_tokens' or 'max_completion_tokens' is too large: 200"):
        client.completions.create(model="tiny-chat", prompt="hello world", max_tokens=200)


def test_megabytes_of_prompt_are_refused_before_tokenizing(client: openai.OpenAI) -> None:
    """10 MB of text: refused by its size (the tokenizer never sees it), as a 400 naming the bytes."""
    with pytest.raises(openai.BadRequestError, match="bytes of text"):
        client.completions.create(model="tiny-chat", prompt="hello " * (10 * 2**20 // 6), max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="bytes of text"):
        client.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "café " * 2**20}],
                                       max_tokens=2)
