"""OpenAI request parsing and response shapes for `kvplan serve` (pure functions, no I/O).

Accepted as vLLM accepts them: `prompt` as text, a list of token ids, or a one-element list of
either; `max_tokens` (or `max_completion_tokens` in chat), `temperature` (default 1.0), `top_p`,
`top_k`, `min_p`, `seed`, `ignore_eos`, `stop_token_ids`, `stream`, `stream_options.include_usage`,
in vLLM's ranges (temperature [0, 2], top_p (0, 1], top_k 0/-1 or 1..vocab, min_p [0, 1]), finite,
with JSON's types: `"stream": "false"` is a 400, not a true. One choice per
request and one prompt per request; anything else is a 400 naming the field. Parameters whose
answer this server cannot give (`n` > 1, `best_of` > 1, `echo`, `logprobs`, `top_logprobs`,
`prompt_logprobs`, `suffix`) or whose effect on the output it does not implement (`stop` strings,
presence / frequency / repetition penalties, `logit_bias`, `bad_words`, `allowed_token_ids`, guided
or structured output, a `response_format` other than text, `tools`, `min_tokens` without
`ignore_eos`) are a 400 naming every one of them, never silently ignored; their no-op values pass.

Prompt length: a text longer than max_model_len x the tokenizer's longest token (in UTF-8 bytes)
is refused before tokenization (megabytes of text take the tokenizer seconds); after it, vLLM's
messages for a prompt that leaves no room (`>= max_model_len` tokens) and for a `max_tokens` that
does not fit.
"""
from __future__ import annotations

import json
import math
import re
import reprlib
import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from kvplan.server.tokenizer import ChatTemplateError, PromptTooLong, TextTokenizer, messages_text

Api = Literal["completions", "chat"]
DEFAULT_MAX_TOKENS = 16  # OpenAI's completions default


class ProtocolError(Exception):
    """A request the server refuses: HTTP `status` and a one-line message."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param

    def body(self) -> dict[str, Any]:
        """OpenAI's error object (as vLLM's ErrorResponse): every 4xx/5xx of the server has this shape."""
        kind = ERROR_TYPES.get(self.status, "BadRequestError" if self.status < 500 else "InternalServerError")
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.status}}


# `type` of the error object: the openai client's exception class for the status where it has one
ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError", 404: "NotFoundError",
               405: "MethodNotAllowedError", 408: "RequestTimeoutError", 413: "RequestTooLargeError",
               422: "UnprocessableEntityError", 429: "RateLimitError", 503: "ServiceUnavailableError"}


def parse_json_body(raw: bytes, max_depth: int) -> Any:
    """The request body as JSON, refusing nesting deeper than `max_depth` with a 400.

    Python's json has no depth limit of its own: its C scanner recurses until the interpreter's
    recursion limit (a RecursionError, answered 400 here), and a value just under that limit would
    still be walked recursively by later code, hence the bracket scan. It runs after the parse: on
    text that is valid JSON its string pattern is linear, on arbitrary bytes it can be quadratic. Bodies
    with at most `max_depth` opening brackets in all (nearly every real request) cannot nest deeper
    and skip it.
    """
    too_deep = ProtocolError(400, f"the request body nests deeper than {max_depth} levels")
    try:
        body = json.loads(raw)
    except RecursionError:
        raise too_deep from None
    except ValueError:  # also UnicodeDecodeError
        raise ProtocolError(400, "the request body is not valid JSON") from None
    if raw.count(b"[") + raw.count(b"{") > max_depth and bracket_depth(raw) > max_depth:
        raise too_deep
    if b"\\u" in raw and re.search(rb"\\u[dD][89a-fA-F]", raw):  # a \uD800-\uDFFF escape: maybe a lone surrogate
        try:
            json.dumps(body, ensure_ascii=False).encode("utf-8")  # pairs were joined by the parse; lone ones fail
        except UnicodeEncodeError:
            raise ProtocolError(
                400, "the request body holds a lone UTF-16 surrogate (\\uD800-\\uDFFF): not valid Unicode"
            ) from None
    return body


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def bracket_depth(raw: bytes) -> int:
    """Deepest [ / { nesting of a valid JSON text, brackets inside strings not counted, at C speed: a
    Python loop (or a walk of the parsed value) over a 16 MiB body takes seconds, during which the
    event loop serves nobody; regex, translate and a numpy running sum take a fraction of one."""
    brackets = np.frombuffer(_JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS), dtype=np.uint8)
    if brackets.size == 0:
        return 0
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), np.int8(1), np.int8(-1))
    return int(np.cumsum(steps, dtype=np.int32).max())


@dataclass(frozen=True)
class GenerationRequest:
    api: Api
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: int | None
    ignore_eos: bool
    stop_token_ids: tuple[int, ...]
    stream: bool
    include_usage: bool


# each sampling field at its no-op values: anything else changes which tokens come out
_NEUTRAL: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("stop", (None, "", [])),
    ("presence_penalty", (None, 0, 0.0)),
    ("frequency_penalty", (None, 0, 0.0)),
    ("repetition_penalty", (None, 1, 1.0)),
    ("logit_bias", (None, {})),
    ("bad_words", (None, [])),
    ("allowed_token_ids", (None,)),
    ("guided_json", (None,)),
    ("guided_regex", (None,)),
    ("guided_choice", (None,)),
    ("guided_grammar", (None,)),
    ("structured_outputs", (None,)),
    ("tools", (None, [])),
    ("functions", (None, [])),
)


def unsupported_parameters(body: dict[str, Any], api: Api) -> list[str]:
    """The parameters set to something this server does not do (their defaults pass)."""
    bad = []
    if body.get("n", 1) not in (1, None):
        bad.append("n")
    if body.get("best_of") not in (None, 1):
        bad.append("best_of")
    if body.get("echo"):
        bad.append("echo")
    logprobs = body.get("logprobs")
    if (logprobs is not None and logprobs is not False) if api == "completions" else bool(logprobs):
        bad.append("logprobs")
    for key in ("top_logprobs", "prompt_logprobs", "suffix"):
        if body.get(key) is not None:
            bad.append(key)
    # what changes which tokens come out: refused unless at its no-op value, so a client never gets
    # text it did not ask for (stop strings, penalties, biases, structured output, tools)
    for key, neutral in _NEUTRAL:
        value = body.get(key)
        if not any(value == n and type(value) is type(n) for n in neutral):
            bad.append(key)
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        bad.append("response_format")
    # min_tokens only holds EOS back; with ignore_eos nothing stops early anyway
    if body.get("min_tokens") not in (None, 0) and body.get("ignore_eos") is not True:
        bad.append("min_tokens")
    return bad


def _context_error(max_model_len: int, prompt_tokens: int) -> ProtocolError:
    """vLLM's words for a prompt that leaves no room for an output token."""
    return ProtocolError(
        400,
        f"This model's maximum context length is {max_model_len} tokens. However, your request has "
        f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
        "messages",
    )


def _check_prompt_bytes(body: dict[str, Any], api: Api, tokenizer: TextTokenizer, max_model_len: int) -> None:
    """Refuse, before tokenizing it, a text no prompt of max_model_len tokens can spell."""
    if tokenizer.max_token_bytes is None:
        return
    if api == "chat":
        messages = body.get("messages")
        text = (
            messages_text(messages) if isinstance(messages, list) and all(isinstance(m, dict) for m in messages) else ""
        )
    else:
        prompt = body.get("prompt")
        text = (
            prompt
            if isinstance(prompt, str)
            else prompt[0]
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], str)
            else ""
        )
    limit_bytes = max_model_len * tokenizer.max_token_bytes
    if len(text) * 4 > limit_bytes and len(text.encode("utf-8", "surrogatepass")) > limit_bytes:
        raise ProtocolError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt has "
            f"{len(text.encode('utf-8', 'surrogatepass'))} bytes of text, more than {max_model_len} tokens "
            f"of this tokenizer can hold ({tokenizer.max_token_bytes} bytes each at most). "
            "Please reduce the length of the input messages.",
            "messages" if api == "chat" else "prompt",
        )


def _number(body: dict[str, Any], key: str, default: float, lo: float, hi: float, *, lo_open: bool = False) -> float:
    """A finite JSON number in the range (Python's json reads NaN and Infinity; they are refused)."""
    value = body.get(key, default)
    if value is None:
        return default
    in_range = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (lo < value if lo_open else lo <= value)
        and value <= hi
    )
    if not in_range:
        raise ProtocolError(
            400, f"{key} must be a number in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {reprlib.repr(value)}", key
        )
    return float(value)


def _flag(body: dict[str, Any], key: str) -> bool:
    """A JSON boolean: the string "false" is refused, not read as true (Python's truthiness would)."""
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ProtocolError(400, f"{key} must be true or false, got {reprlib.repr(value)}", key)
    return value


def _top_k(body: dict[str, Any], vocab_size: int) -> int:
    """vLLM's top_k: 0 or -1 turn it off, else 1..vocab_size."""
    value = body.get("top_k")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < -1 or value > vocab_size:
        raise ProtocolError(
            400,
            f"top_k must be 0 (disable), -1 (disable) or an integer in [1, {vocab_size}] "
            f"(the vocabulary size), got {reprlib.repr(value)}",
            "top_k",
        )
    return max(value, 0)


def _token_ids(value: Any, vocab_size: int) -> tuple[int, ...]:
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise ProtocolError(400, "prompt token ids must be integers", "prompt")
    if value and (min(value) < 0 or max(value) >= vocab_size):
        raise ProtocolError(400, f"prompt token ids must be in [0, {vocab_size})", "prompt")
    return tuple(value)


def _prompt_ids(
    body: dict[str, Any], api: Api, tokenizer: TextTokenizer, vocab_size: int, max_tokens: int | None = None
) -> tuple[int, ...]:
    """The prompt's token ids; PromptTooLong when the tokenizer stops counting past `max_tokens`."""
    if api == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise ProtocolError(400, "messages must be a non-empty list of objects", "messages")
        try:
            return _token_ids(tokenizer.encode_chat(messages, max_tokens), vocab_size)
        except ChatTemplateError as exc:
            raise ProtocolError(400, str(exc), "messages") from None
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return _token_ids(tokenizer.encode(prompt, max_tokens), vocab_size)
    if isinstance(prompt, list) and (not prompt or not isinstance(prompt[0], (str, list))):
        if max_tokens is not None and len(prompt) > max_tokens:  # before the per-id checks (a Python loop)
            raise PromptTooLong(len(prompt))
        return _token_ids(prompt, vocab_size)
    if isinstance(prompt, list):
        raise ProtocolError(400, "only one prompt per request is supported", "prompt")
    raise ProtocolError(400, "prompt must be a string or a list of token ids", "prompt")


def parse_request(
    body: Any, api: Api, *, served_model_name: str, tokenizer: TextTokenizer, vocab_size: int, max_model_len: int
) -> GenerationRequest:
    if not isinstance(body, dict):
        raise ProtocolError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != served_model_name:
        raise ProtocolError(404, f"The model `{model}` does not exist.", "model")
    unsupported = unsupported_parameters(body, api)
    if unsupported:
        raise ProtocolError(
            400,
            f"unsupported parameters: {', '.join(unsupported)} (kvplan serve returns one choice of "
            "generated text, without log-probabilities, echo or suffix)",
            unsupported[0],
        )
    _check_prompt_bytes(body, api, tokenizer, max_model_len)
    try:
        ids = _prompt_ids(body, api, tokenizer, vocab_size, max_model_len)
    except PromptTooLong as exc:
        raise _context_error(max_model_len, exc.num_tokens) from None
    if not ids:
        raise ProtocolError(400, "the prompt is empty", "prompt")
    if len(ids) >= max_model_len:
        raise _context_error(max_model_len, len(ids))
    key = "max_completion_tokens" if api == "chat" and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(key)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS if api == "completions" else max_model_len - len(ids)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise ProtocolError(400, f"{key} must be a positive integer, got {reprlib.repr(max_tokens)}", key)
    if len(ids) + max_tokens > max_model_len:  # vLLM's message
        raise ProtocolError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
            f"context length is {max_model_len} tokens and your request has {len(ids)} input tokens "
            f"({max_tokens} > {max_model_len} - {len(ids)}).",
            key,
        )
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ProtocolError(400, f"seed must be an integer, got {reprlib.repr(seed)}", "seed")
    stop_ids = body.get("stop_token_ids") or []
    if not isinstance(stop_ids, list):
        raise ProtocolError(400, "stop_token_ids must be a list of integers", "stop_token_ids")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ProtocolError(400, f"stream_options must be an object, got {reprlib.repr(options)}", "stream_options")
    return GenerationRequest(
        api=api,
        prompt_token_ids=ids,
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        top_k=_top_k(body, vocab_size),
        min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
        seed=seed,
        ignore_eos=_flag(body, "ignore_eos"),
        stop_token_ids=_token_ids(stop_ids, vocab_size),
        stream=_flag(body, "stream"),
        include_usage=_flag(options or {}, "include_usage"),
    )


# --- responses ---------------------------------------------------------------------------------
def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def sse(obj: dict[str, Any] | str) -> bytes:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, separators=(',', ':'))}\n\n".encode()


@dataclass(frozen=True)
class ChunkMaker:
    """Builds the JSON objects of one request's responses (id, model and creation time fixed)."""

    api: Api
    request_id: str
    model: str
    created: int

    @classmethod
    def new(cls, api: Api, request_id: str, model: str) -> ChunkMaker:
        return cls(api, request_id, model, int(time.time()))

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.request_id, "object": obj, "created": self.created, "model": self.model}

    def role_chunk(self) -> dict[str, Any]:
        """Chat streams open with the assistant role and empty content, as OpenAI's do."""
        return {
            **self._head("chat.completion.chunk"),
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            ],
        }

    def token_chunk(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        if self.api == "chat":
            return {
                **self._head("chat.completion.chunk"),
                "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish_reason}],
            }
        return {
            **self._head("text_completion"),
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
        }

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.api == "chat" else "text_completion"
        return {**self._head(obj), "choices": [], "usage": usage(prompt_tokens, completion_tokens)}

    def full(self, text: str, finish_reason: str | None, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        if self.api == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            return {
                **self._head("chat.completion"),
                "choices": [choice],
                "usage": usage(prompt_tokens, completion_tokens),
            }
        return {
            **self._head("text_completion"),
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
            "usage": usage(prompt_tokens, completion_tokens),
        }
